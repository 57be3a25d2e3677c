/*
** Extracting an archive (see unpack.h for the rules and why the entries
** are written here rather than by libarchive's disk writer).
*/
#define _GNU_SOURCE
#include "unpack.h"

#include "archive_lib.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a new directory takes on disk, as the disk cap's walk counts it. */
#define DIR_BYTES 4096

/* A directory whose mode lacks some of u+rwx gets it once everything inside is extracted. */
typedef struct deferred_mode {
  char *path;
  mode_t mode;
} deferred_mode;

typedef struct unpacker {
  const archive_lib *la;
  struct archive *a;
  const unpack_source *src;
  int root;                     /* the target directory (not ours) */
  int parent_fd;                /* the last entry's parent directory, or -1 */
  char parent_path[PATH_MAX];   /* ... relative to root, "" for root itself */
  const unpack_limits *lim;
  uint64_t disk_left;           /* UINT64_MAX without a cap */
  deferred_mode *deferred;
  size_t ndeferred, deferred_cap;
  unpack_stats *st;
  failure *f;
  const char *entry;            /* the raw name of the entry being extracted, for messages */
  char last_done[PATH_MAX];     /* a copy of the last extracted entry's name: libarchive frees its own at the next header */
  const char *what;             /* what messages start with */
} unpacker;

/* Fills u->f from an errno value: "WHAT: DOING `entry`: reason". */
static bool entry_errno(unpacker *u, int err, const char *doing) {
  char what[128];
  snprintf(what, sizeof what, "%s: %s", u->what, doing);
  return fail_errno(u->f, err, what, u->entry);
}

/* ===== names ===== */

/*
** The entry's name with "." and empty components dropped, into out
** (PATH_MAX): "" for the target directory itself. Absolute names and
** `..` are refused; `kind` says what the name is for the message.
*/
static bool clean_name(unpacker *u, const char *raw, const char *kind, char *out) {
  if (!raw || !*raw) return fail(u->f, "invalid_request", "%s: an entry has no %s", u->what, kind);
  if (raw[0] == '/')
    return fail(u->f, "permission_denied", "%s: entry `%s`: %s `%s` is absolute; only names relative "
                "to the target directory are extracted", u->what, u->entry, kind, raw);
  size_t len = 0;
  out[0] = '\0';
  for (const char *p = raw; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return fail(u->f, "permission_denied", "%s: entry `%s`: %s `%s` has a `..` component; nothing is "
                  "extracted above the target directory", u->what, u->entry, kind, raw);
    if (n > NAME_MAX || len + n + 2 >= PATH_MAX)
      return fail(u->f, "invalid_request", "%s: entry `%s`: %s is too long", u->what, u->entry, kind);
    if (n > 0 && !(n == 1 && p[0] == '.')) len += (size_t)sprintf(out + len, "%s%.*s", len ? "/" : "", (int)n, p);
    p += n;
    while (*p == '/') p++;
  }
  return true;
}

/* Splits a clean name at its last '/': *leaf points into name, dir gets the rest ("" for none). */
static const char *split_name(const char *name, char *dir) {
  const char *slash = strrchr(name, '/');
  size_t n = slash ? (size_t)(slash - name) : 0;
  memcpy(dir, name, n);
  dir[n] = '\0';
  return slash ? slash + 1 : name;
}

/* Whether a symlink in directory dir (clean, relative) to target stays beneath the target directory. */
static bool link_stays_inside(const char *dir, const char *target) {
  if (target[0] == '/') return false;
  long depth = 0;
  for (const char *p = dir; *p; p += strcspn(p, "/"), p += *p == '/') depth++;
  for (const char *p = target; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') { if (--depth < 0) return false; }
    else if (n > 0 && !(n == 1 && p[0] == '.')) depth++;
    p += n;
    while (*p == '/') p++;
  }
  return true;
}

/* ===== directories ===== */

/* Why component `upto` of the walk could not be opened as a directory. */
static bool walk_failure(unpacker *u, int dirfd, const char *name, const char *upto, int err) {
  struct stat st;
  if (err == ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return fail(u->f, "permission_denied", "%s: entry `%s`: `%s` is a symlink; entries are never "
                "written through symlinks", u->what, u->entry, upto);
  if (err == ENOTDIR)
    return fail(u->f, "not_a_directory", "%s: entry `%s`: `%s` is not a directory", u->what, u->entry, upto);
  return entry_errno(u, err, "entry");
}

/* Opens (O_PATH) the component `name` of dirfd as a directory, making it when create is set and it is missing. */
static int open_component(int dirfd, const char *name, bool create) {
  int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 || errno != ENOENT || !create) return fd;
  if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST) return -1;
  return openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* An fd of the directory rel beneath root (clean, "" for root), walked without following any link; -1 with u->f. */
static int walk_dirs(unpacker *u, const char *rel, bool create) {
  int fd = openat(u->root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) { entry_errno(u, errno, "the target directory of entry"); return -1; }
  char upto[PATH_MAX];
  for (const char *p = rel; *p;) {
    size_t n = strcspn(p, "/");
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, "%.*s", (int)n, p);
    snprintf(upto, sizeof upto, "%.*s", (int)(p + n - rel), rel);
    int next = open_component(fd, name, create);
    if (next < 0) { walk_failure(u, fd, name, upto, errno); close(fd); return -1; }
    close(fd);
    fd = next;
    p += n + (p[n] == '/');
  }
  return fd;
}

/* The parent directory of an entry: the last one again (archives list a directory's entries together) or a walk. */
static int parent_dir(unpacker *u, const char *rel) {
  if (u->parent_fd >= 0 && strcmp(u->parent_path, rel) == 0) return u->parent_fd;
  if (u->parent_fd >= 0) close(u->parent_fd);
  u->parent_fd = walk_dirs(u, rel, true);
  snprintf(u->parent_path, sizeof u->parent_path, "%s", u->parent_fd >= 0 ? rel : "");
  return u->parent_fd;
}

static void forget_parent(unpacker *u) {
  if (u->parent_fd >= 0) close(u->parent_fd);
  u->parent_fd = -1;
}

/* ===== the disk allowance ===== */

static bool charge(unpacker *u, uint64_t bytes, const char *what) {
  if (bytes <= u->disk_left) {
    if (u->disk_left != UINT64_MAX) u->disk_left -= bytes;
    return true;
  }
  return fail(u->f, "limit_exceeded", "%s: entry `%s` (%s of %llu bytes) would take the session past its "
              "disk cap of %llu bytes (its files took %llu when the extraction began%s%s%s)", u->what, u->entry, what,
              (unsigned long long)bytes, (unsigned long long)u->lim->cap, (unsigned long long)u->lim->used,
              u->lim->profile ? "; profile `" : "", u->lim->profile ? u->lim->profile : "", u->lim->profile ? "`" : "");
}

/* ===== making room ===== */

/*
** Clears the place of name in dirfd for a new entry: a file or link there
** is removed (a link is replaced, never written through); a directory is
** kept when want_dir, and refused otherwise.
*/
static bool clear_place(unpacker *u, int dirfd, const char *name, bool want_dir) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? true : entry_errno(u, errno, "entry");
  if (S_ISDIR(st.st_mode)) {
    if (want_dir) return true;
    return fail(u->f, "already_exists", "%s: entry `%s`: a directory of that name exists and is "
                "not replaced", u->what, u->entry);
  }
  if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return true;
  return entry_errno(u, errno, "replacing the entry");
}

/* ===== entries ===== */

static mode_t perm_of(const unpacker *u, struct archive_entry *e) {
  return u->la->archive_entry_perm(e) & 0777;   /* no setuid, setgid or sticky bit */
}

static void mtime_of(const unpacker *u, struct archive_entry *e, struct timespec t[2]) {
  t[0] = (struct timespec){.tv_nsec = UTIME_OMIT};
  t[1] = u->la->archive_entry_mtime_is_set(e)
       ? (struct timespec){.tv_sec = u->la->archive_entry_mtime(e), .tv_nsec = u->la->archive_entry_mtime_nsec(e)}
       : (struct timespec){.tv_nsec = UTIME_OMIT};
}

static bool write_all_at(int fd, const char *data, size_t len, off_t offset) {
  for (size_t done = 0; done < len;) {
    ssize_t n = pwrite(fd, data + done, len - done, offset + (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += (size_t)n;
  }
  return true;
}

static bool archive_failed(unpacker *u, const char *doing) {
  return fail(u->f, "invalid_request", "%s: entry `%s`: the archive is damaged or ends early while %s "
              "(libarchive: %s)", u->what, u->entry, doing, u->la->archive_error_string(u->a));
}

/* The entry's data blocks into fd at their offsets: the holes of a sparse entry stay holes. */
static bool copy_data(unpacker *u, int fd, int64_t size) {
  const void *block;
  size_t len;
  la_int64_t offset;
  int rc;
  while ((rc = u->la->archive_read_data_block(u->a, &block, &len, &offset)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    if (offset < 0 || (uint64_t)offset + len > (uint64_t)size) return archive_failed(u, "reading its data");
    if (!write_all_at(fd, block, len, offset)) return entry_errno(u, errno, "writing entry");
  }
  if (rc != ARCHIVE_EOF) return archive_failed(u, "reading its data");
  if (ftruncate(fd, size) < 0) return entry_errno(u, errno, "writing entry");
  return true;
}

static bool extract_file(unpacker *u, struct archive_entry *e, int dirfd, const char *leaf) {
  int64_t size = u->la->archive_entry_size(e) > 0 ? u->la->archive_entry_size(e) : 0;
  if (!charge(u, (uint64_t)size, "a file") || !clear_place(u, dirfd, leaf, false)) return false;
  int fd = openat(dirfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return entry_errno(u, errno, "creating entry");
  bool ok = copy_data(u, fd, size);
  struct timespec t[2];
  mtime_of(u, e, t);
  if (ok && (fchmod(fd, perm_of(u, e)) < 0 || futimens(fd, t) < 0))
    ok = entry_errno(u, errno, "setting the mode and time of entry");
  close(fd);
  return ok;
}

static void defer_mode(unpacker *u, const char *path, mode_t mode) {
  if (u->ndeferred == u->deferred_cap) {
    u->deferred_cap = u->deferred_cap ? 2 * u->deferred_cap : 16;
    u->deferred = realloc(u->deferred, u->deferred_cap * sizeof *u->deferred);
    if (!u->deferred) abort();
  }
  u->deferred[u->ndeferred++] = (deferred_mode){strdup(path), mode};
}

/* A directory: made (or kept), with u+rwx until the end when its own mode lacks them. */
static bool extract_dir(unpacker *u, struct archive_entry *e, int dirfd, const char *leaf, const char *name) {
  if (!clear_place(u, dirfd, leaf, true)) return false;
  if (mkdirat(dirfd, leaf, 0700) == 0) {
    if (!charge(u, DIR_BYTES, "a directory")) return false;
  } else if (errno != EEXIST) {
    return entry_errno(u, errno, "creating entry");
  }
  int fd = openat(dirfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return walk_failure(u, dirfd, leaf, name, errno);
  mode_t mode = perm_of(u, e);
  int rc = fchmod(fd, mode | 0700);
  close(fd);
  if (rc < 0) return entry_errno(u, errno, "setting the mode of entry");
  if ((mode & 0700) != 0700) defer_mode(u, name, mode);
  return true;
}

static bool extract_symlink(unpacker *u, struct archive_entry *e, int dirfd, const char *leaf, const char *dir) {
  const char *target = u->la->archive_entry_symlink(e);
  if (!target || !*target) return fail(u->f, "invalid_request", "%s: entry `%s`: a symlink without a target", u->what, u->entry);
  if (!link_stays_inside(dir, target))
    return fail(u->f, "permission_denied", "%s: entry `%s`: symlink to `%s` points outside the target "
                "directory", u->what, u->entry, target);
  if (!clear_place(u, dirfd, leaf, false)) return false;
  if (symlinkat(target, dirfd, leaf) < 0) return entry_errno(u, errno, "creating entry");
  struct timespec t[2];
  mtime_of(u, e, t);
  utimensat(dirfd, leaf, t, AT_SYMLINK_NOFOLLOW);   /* a filesystem without link times keeps the link */
  return true;
}

/* A hard link: to a regular file already beneath the target directory, found without following links. */
static bool extract_hardlink(unpacker *u, const char *raw_target, int dirfd, const char *leaf, const char *name) {
  char target[PATH_MAX], tdir[PATH_MAX];
  if (!clean_name(u, raw_target, "hard link target", target)) return false;
  if (strcmp(target, name) == 0) return true;   /* a link to itself: it is there already */
  const char *tleaf = split_name(target, tdir);
  int tfd = walk_dirs(u, tdir, false);
  if (tfd < 0) return false;
  struct stat st;
  bool ok = fstatat(tfd, tleaf, &st, AT_SYMLINK_NOFOLLOW) == 0
          ? S_ISREG(st.st_mode) || fail(u->f, "permission_denied", "%s: entry `%s`: hard link to `%s`, "
                                        "which is not a regular file", u->what, u->entry, raw_target)
          : entry_errno(u, errno, "hard link target of entry");
  ok = ok && clear_place(u, dirfd, leaf, false);
  if (ok && linkat(tfd, tleaf, dirfd, leaf, 0) < 0) ok = entry_errno(u, errno, "linking entry");
  close(tfd);
  return ok;
}

static const char *special_kind(mode_t type) {
  switch (type) {
    case AE_IFCHR: return "a character device";
    case AE_IFBLK: return "a block device";
    case AE_IFIFO: return "a FIFO";
    case AE_IFSOCK: return "a socket";
    default: return "of an unknown type";
  }
}

/* Extracts the entry e, named name (clean, not ""), in its parent directory. */
static bool extract_in_place(unpacker *u, struct archive_entry *e, const char *name) {
  char dir[PATH_MAX];
  const char *leaf = split_name(name, dir);
  mode_t type = u->la->archive_entry_filetype(e);
  bool known = u->la->archive_entry_hardlink(e) || type == AE_IFREG || type == AE_IFDIR || type == AE_IFLNK;
  if (!known)
    return fail(u->f, "permission_denied", "%s: entry `%s` is %s; device files, FIFOs and sockets are "
                "not extracted", u->what, u->entry, special_kind(type));
  int dirfd = parent_dir(u, dir);
  if (dirfd < 0) return false;
  if (u->la->archive_entry_hardlink(e)) return extract_hardlink(u, u->la->archive_entry_hardlink(e), dirfd, leaf, name);
  if (type == AE_IFDIR) return extract_dir(u, e, dirfd, leaf, name);
  return type == AE_IFLNK ? extract_symlink(u, e, dirfd, leaf, dir) : extract_file(u, e, dirfd, leaf);
}

static bool extract_entry(unpacker *u, struct archive_entry *e) {
  char name[PATH_MAX];
  u->entry = u->la->archive_entry_pathname(e) ? u->la->archive_entry_pathname(e) : "";
  if (!clean_name(u, u->la->archive_entry_pathname(e), "name", name)) return false;
  if (*name) return extract_in_place(u, e, name);
  /* "./": the target directory itself, which is there already and keeps its mode. */
  if (u->la->archive_entry_filetype(e) == AE_IFDIR && !u->la->archive_entry_hardlink(e)) return true;
  return fail(u->f, "invalid_request", "%s: entry `%s` names the target directory itself", u->what, u->entry);
}

/* ===== the archive ===== */

static la_ssize_t on_read(struct archive *a, void *ctx, const void **data) {
  unpacker *u = ctx;
  ssize_t n = u->src->read(u->src->ctx, data);
  if (n < 0) {
    u->la->archive_set_error(a, ECANCELED, "the extraction was stopped");
    return -1;
  }
  u->st->bytes += (uint64_t)n;
  return n;
}

static void apply_deferred_modes(unpacker *u) {
  for (size_t i = u->ndeferred; i-- > 0;) {   /* deepest last made: children before their parents */
    char dir[PATH_MAX];
    const char *leaf = split_name(u->deferred[i].path, dir);
    int dirfd = walk_dirs(u, dir, false);
    int fd = dirfd < 0 ? -1 : openat(dirfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) { fchmod(fd, u->deferred[i].mode); close(fd); }
    if (dirfd >= 0) close(dirfd);
  }
}

static bool next_header_failed(unpacker *u) {
  if (u->st->entries == 0)
    return fail(u->f, "invalid_request", "%s: not a tar archive, or damaged at its start (libarchive: %s)", u->what,
                u->la->archive_error_string(u->a));
  return fail(u->f, "invalid_request", "%s: the archive is damaged or ends early after entry `%s` "
              "(libarchive: %s)", u->what, u->last_done, u->la->archive_error_string(u->a));
}

static bool extract_all(unpacker *u) {
  if (u->la->archive_read_open(u->a, u, NULL, on_read, NULL) != ARCHIVE_OK) return next_header_failed(u);
  struct archive_entry *e;
  int rc;
  while ((rc = u->la->archive_read_next_header(u->a, &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    if (!extract_entry(u, e)) return false;
    snprintf(u->last_done, sizeof u->last_done, "%s", u->entry);
    u->st->entries++;
  }
  if (rc != ARCHIVE_EOF) return next_header_failed(u);
  apply_deferred_modes(u);
  return true;
}

bool unpack(int dirfd, const unpack_source *src, const unpack_limits *lim, unpack_stats *st, failure *f) {
  *st = (unpack_stats){0};
  unpacker u = {.src = src, .root = dirfd, .parent_fd = -1, .lim = lim, .st = st, .f = f, .entry = "",
               .what = lim->what ? lim->what : "write_archive"};
  u.disk_left = !lim->cap ? UINT64_MAX : lim->used < lim->cap ? lim->cap - lim->used : 0;
  if (!(u.la = archive_lib_get(f))) return false;
  if (!(u.a = u.la->archive_read_new())) return fail(f, "limit_exceeded", "%s: out of memory", u.what);
  u.la->archive_read_support_format_tar(u.a);
  u.la->archive_read_support_format_empty(u.a);   /* no bytes at all: an empty archive */
  bool ok = extract_all(&u);
  u.la->archive_read_free(u.a);
  forget_parent(&u);
  for (size_t i = 0; i < u.ndeferred; i++) free(u.deferred[i].path);
  free(u.deferred);
  return ok;
}

/* ===== from memory ===== */

typedef struct memory_source {
  const void *data;
  size_t len;
  bool given;
} memory_source;

static ssize_t read_memory(void *ctx, const void **data) {
  memory_source *m = ctx;
  *data = m->data;
  if (m->given) return 0;
  m->given = true;
  return (ssize_t)m->len;
}

bool unpack_memory(int dirfd, const void *data, size_t len, const unpack_limits *lim, unpack_stats *st, failure *f) {
  memory_source m = {data, len, false};
  unpack_source src = {read_memory, &m};
  return unpack(dirfd, &src, lim, st, f);
}
