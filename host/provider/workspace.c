/*
** Copying and hiding trees (see workspace.h). The walk uses directory fds
** and *at() calls with O_NOFOLLOW, so a link in the tree is never
** followed, whatever it points to, and a link swapped in mid-walk fails
** that entry's open instead of leading elsewhere.
*/
#define _GNU_SOURCE
#include "workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "errcodes.h"

/* Deeper trees are refused: each level holds two fds while it is copied. */
#define MAX_DEPTH 256

/* A large file is copied in pieces of this size, the cancel flag checked between them. */
#define CHUNK (64u << 20)

/*
** The Cache Directory Tagging Specification
** (https://bford.info/cachedir/): a directory holding a file CACHEDIR.TAG
** that starts with this signature holds only what can be made again. The
** workflow engine tags its `.smolwf/` report root this way, so the reports
** of earlier runs do not nest into the workspace of later ones.
*/
#define CACHEDIR_SIGNATURE "Signature: 8a477f597d28d172789f06886806bc55"

/* One walk: the spec, where it is (relative to the top) and what it found. */
typedef struct walk {
  const copy_spec *spec;
  copy_outcome *out;
  bool try_clone;               /* FICLONE has not been refused yet */
  char rel[PATH_MAX];           /* the entry at hand, relative to the top ("" for the top) */
} walk;

static bool copy_dir(walk *w, int src, int dst, int depth);

/* ====================================================== failures and warnings */

static const char *where(walk *w, char *buf) {
  int n = snprintf(buf, PATH_MAX, "%s%s%.*s", w->spec->src_label, *w->rel ? "/" : "", PATH_MAX / 2, w->rel);
  if (n >= PATH_MAX) buf[PATH_MAX - 1] = '\0';
  return buf;
}

/*
** A file or directory the provider may not read makes the whole open fail
** (a partial workspace would be worse), with a message saying what to fix.
*/
static bool fail_copy(walk *w, int err, const char *what) {
  char path[PATH_MAX];
  where(w, path);
  w->out->ok = false;
  if (err != EACCES && err != EPERM) return fail_errno(&w->out->f, err, what, path);
  return fail(&w->out->f, errno_code(err),
              "workspace_sync.host_path: `%s` is unreadable by the provider (uid %ld): %s; "
              "make it readable, or move it out of the workspace", path, (long)geteuid(), strerror(err));
}

/* Something the tree no longer has (or no longer had whole): skipped, and said so. */
static bool skip_entry(walk *w, const char *why) {
  copy_outcome *o = w->out;
  if (o->skipped < COPY_WARNINGS_KEPT) {
    char path[PATH_MAX];
    if (asprintf(&o->warnings[o->skipped], "`%s` %s during the copy; skipped", where(w, path), why) < 0)
      o->warnings[o->skipped] = NULL;
  }
  o->skipped++;
  return true;
}

static bool vanished(int err) {
  return err == ENOENT || err == ENOTDIR || err == ESTALE;
}

static bool cancelled(walk *w) {
  if (!job_cancelled(w->spec->job)) return false;
  w->out->ok = false;
  return !fail(&w->out->f, "internal", "the copy was cancelled");
}

/* ====================================================== file data */

static bool read_write(walk *w, int in, int out) {
  char buf[64 * 1024];
  for (;;) {
    if (cancelled(w)) return false;
    ssize_t n = read(in, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || write(out, buf, (size_t)n) != n) return fail_copy(w, errno ? errno : EIO, "copying workspace file");
    atomic_fetch_add(&w->spec->job->bytes, (uint64_t)n);
  }
}

/* In the kernel, a chunk at a time (shared extents on file systems that can). */
static bool copy_range(walk *w, int in, int out) {
  for (;;) {
    if (cancelled(w)) return false;
    ssize_t n = copy_file_range(in, NULL, out, NULL, CHUNK, 0);
    if (n == 0) return true;
    if (n > 0) { atomic_fetch_add(&w->spec->job->bytes, (uint64_t)n); continue; }
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS)
      return fail_copy(w, errno, "copying workspace file");
    return read_write(w, in, out);   /* no in-kernel copy between these file systems */
  }
}

/* FICLONE shares the whole file's extents at once; once refused, it is not tried again. */
static bool copy_data(walk *w, int in, int out, const struct stat *st) {
  if (w->try_clone && ioctl(out, FICLONE, in) == 0) {
    atomic_fetch_add(&w->spec->job->bytes, (uint64_t)st->st_size);
    return true;
  }
  w->try_clone = false;
  w->out->cloned = false;
  return copy_range(w, in, out);
}

/* ====================================================== metadata */

static void keep_times(int fd, const struct stat *st) {
  struct timespec times[2] = {st->st_atim, st->st_mtim};
  futimens(fd, times);
}

/* An overlay layer's extended attributes (user.overlay.opaque, ...): its meaning is in them. */
static void copy_xattrs(int in, int out) {
  char names[4096], value[4096];
  ssize_t len = flistxattr(in, names, sizeof names);
  for (ssize_t i = 0; i < len; i += (ssize_t)strlen(names + i) + 1) {
    ssize_t n = fgetxattr(in, names + i, value, sizeof value);
    if (n >= 0) fsetxattr(out, names + i, value, (size_t)n, 0);
  }
}

static bool same_file_still(int fd, const struct stat *before) {
  struct stat now;
  return fstat(fd, &now) == 0 && now.st_size == before->st_size &&
         now.st_mtim.tv_sec == before->st_mtim.tv_sec && now.st_mtim.tv_nsec == before->st_mtim.tv_nsec;
}

/* ====================================================== entries */

static bool copy_file(walk *w, int src, int dst, const char *name) {
  int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (in < 0) return vanished(errno) ? skip_entry(w, "vanished") : fail_copy(w, errno, "reading workspace file");
  struct stat st;
  if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) { close(in); return skip_entry(w, "changed type"); }
  int out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) { close(in); w->out->ok = false; return fail_errno(&w->out->f, errno, "creating workspace file", w->rel); }
  bool ok = copy_data(w, in, out, &st);
  bool changed = ok && !same_file_still(in, &st);
  if (ok && !changed) {
    fchmod(out, st.st_mode & 07777);
    if (w->spec->overlay_layer) copy_xattrs(in, out);
    keep_times(out, &st);
  }
  close(in);
  close(out);
  if (changed) { unlinkat(dst, name, 0); return skip_entry(w, "changed"); }
  if (ok) atomic_fetch_add(&w->spec->job->files, 1);
  return ok;
}

static bool copy_link(walk *w, int src, int dst, const char *name) {
  char target[PATH_MAX];
  ssize_t n = readlinkat(src, name, target, sizeof target - 1);
  if (n < 0) return vanished(errno) || errno == EINVAL ? skip_entry(w, "vanished") : fail_copy(w, errno, "reading workspace link");
  target[n] = '\0';
  if (symlinkat(target, dst, name) < 0) { w->out->ok = false; return fail_errno(&w->out->f, errno, "creating workspace link", w->rel); }
  atomic_fetch_add(&w->spec->job->files, 1);
  return true;
}

/* An overlay whiteout (a 0/0 character device) marks a lower file as removed. */
static bool copy_whiteout(walk *w, int dst, const char *name, const struct stat *st) {
  if (mknodat(dst, name, S_IFCHR | (st->st_mode & 07777), makedev(0, 0)) == 0) return true;
  w->out->ok = false;
  return fail_errno(&w->out->f, errno, "creating overlay whiteout", w->rel);
}

/* Is the directory open at fd tagged as a cache (CACHEDIR.TAG starting with the signature)? */
static bool is_cache_dir(int fd) {
  int tag = openat(fd, "CACHEDIR.TAG", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (tag < 0) return false;
  char head[sizeof CACHEDIR_SIGNATURE - 1];
  struct stat st;
  bool tagged = fstat(tag, &st) == 0 && S_ISREG(st.st_mode) &&
                read(tag, head, sizeof head) == (ssize_t)sizeof head &&
                memcmp(head, CACHEDIR_SIGNATURE, sizeof head) == 0;
  close(tag);
  return tagged;
}

/* The provider's own root (and so every session's files), or another directory the caller excluded. */
static bool skipped(const copy_spec *s, const struct stat *st) {
  for (size_t i = 0; i < s->nskip; i++)
    if (s->skip[i].dev == st->st_dev && s->skip[i].ino == st->st_ino) return true;
  return false;
}

static bool copy_subdir(walk *w, int src, int dst, const char *name, const struct stat *st, int depth) {
  if (skipped(w->spec, st)) return true;
  if (depth >= MAX_DEPTH) {
    char path[PATH_MAX];
    w->out->ok = false;
    return fail(&w->out->f, "limit_exceeded", "workspace `%s`: deeper than %d levels", where(w, path), MAX_DEPTH);
  }
  int in = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return vanished(errno) ? skip_entry(w, "vanished") : fail_copy(w, errno, "reading workspace directory");
  if (w->spec->skip_cache_dirs && is_cache_dir(in)) { close(in); return true; }
  if (mkdirat(dst, name, 0700) < 0) { close(in); w->out->ok = false; return fail_errno(&w->out->f, errno, "creating workspace directory", w->rel); }
  int out = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (out < 0) { close(in); w->out->ok = false; return fail_errno(&w->out->f, errno, "opening workspace directory", w->rel); }
  if (w->spec->overlay_layer) copy_xattrs(in, out);
  bool ok = copy_dir(w, in, out, depth + 1);   /* takes `in` */
  /* The mode last: a read-only directory must still take its entries first. */
  if (ok) { fchmod(out, st->st_mode & 07777); keep_times(out, st); }
  close(out);
  return ok;
}

static bool excluded(walk *w, bool is_dir) {
  return w->spec->excludes && excludes_match(w->spec->excludes, w->rel, is_dir);
}

/* The test seam's pause (copy_spec.pace_ms), cut short by a cancel. */
static void pace(walk *w) {
  for (unsigned i = 0; i < w->spec->pace_ms && !job_cancelled(w->spec->job); i++) usleep(1000);
}

static bool copy_entry(walk *w, int src, int dst, const char *name, int depth) {
  struct stat st;
  if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return vanished(errno) ? skip_entry(w, "vanished") : fail_copy(w, errno, "reading workspace");
  if (excluded(w, S_ISDIR(st.st_mode))) return true;
  if (S_ISDIR(st.st_mode)) return copy_subdir(w, src, dst, name, &st, depth);
  if (S_ISREG(st.st_mode)) {
    bool ok = copy_file(w, src, dst, name);
    if (ok) pace(w);
    return ok;
  }
  if (S_ISLNK(st.st_mode)) return copy_link(w, src, dst, name);
  if (w->spec->overlay_layer && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0))
    return copy_whiteout(w, dst, name, &st);
  return true;   /* sockets, fifos, devices: nothing a workspace needs */
}

/* Points w->rel at name inside the current directory; returns the old length to put back. */
static size_t enter(walk *w, const char *name) {
  size_t len = strlen(w->rel);
  snprintf(w->rel + len, sizeof w->rel - len, "%s%s", len ? "/" : "", name);
  return len;
}

/* Copies the entries of src (which it closes) into dst. */
static bool copy_dir(walk *w, int src, int dst, int depth) {
  DIR *d = fdopendir(src);
  if (!d) { close(src); return fail_copy(w, errno, "reading workspace directory"); }
  bool ok = true;
  errno = 0;
  for (struct dirent *e; ok && (e = readdir(d)); errno = 0) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (cancelled(w)) { ok = false; break; }
    size_t back = enter(w, e->d_name);
    ok = copy_entry(w, src, dst, e->d_name, depth);
    w->rel[back] = '\0';
  }
  if (ok && errno && !vanished(errno)) ok = fail_copy(w, errno, "reading workspace directory");
  closedir(d);
  return ok;
}

void workspace_copy(const copy_spec *spec, copy_outcome *out) {
  walk w = {.spec = spec, .out = out, .try_clone = true};
  memset(out, 0, sizeof *out);
  out->ok = out->cloned = true;
  int src = openat(spec->src_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (src < 0) { fail_copy(&w, errno, "workspace_sync.host_path"); return; }
  copy_dir(&w, src, spec->dst_fd, 0);
}

void copy_outcome_clear(copy_outcome *out) {
  for (uint64_t i = 0; i < out->skipped && i < COPY_WARNINGS_KEPT; i++) free(out->warnings[i]);
  memset(out, 0, sizeof *out);
}

/* ====================================================== hiding in an overlay */

/* Makes dst/name look like the directory src/name (mode, times): overlay shows the upper one's. */
static int mirror_dir(int src, int dst, const char *name) {
  struct stat st;
  if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return -1;
  if (mkdirat(dst, name, st.st_mode & 07777) < 0 && errno != EEXIST) return -1;
  int fd = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) { fchmod(fd, st.st_mode & 07777); keep_times(fd, &st); }
  return fd;
}

/* Ends a hide_path walk: closes both fds and says how it went. */
static bool hide_done(int s, int d, bool ok) {
  if (s >= 0) close(s);
  if (d >= 0) close(d);
  return ok;
}

/* Walks rel's parents in both trees, mirroring each into dst; a whiteout for its last component. */
bool workspace_hide_path(int src_fd, int dst_fd, const char *rel, failure *f) {
  int s = openat(src_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  int d = openat(dst_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s < 0 || d < 0) return hide_done(s, d, fail_errno(f, errno, "hiding in the workspace", rel));
  const char *c = rel;
  for (size_t n; c[n = strcspn(c, "/")] == '/'; c += n + 1) {
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, "%.*s", (int)n, c);
    int ns = openat(s, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ns < 0) return hide_done(s, d, vanished(errno) || errno == ELOOP);   /* not in the lower layer */
    int nd = mirror_dir(s, d, name);
    int err = errno;
    hide_done(s, d, true);
    s = ns;
    d = nd;
    if (nd < 0) return hide_done(s, d, fail_errno(f, err, "hiding in the workspace", rel));
  }
  struct stat st;
  if (fstatat(s, c, &st, AT_SYMLINK_NOFOLLOW) < 0) return hide_done(s, d, true);
  if (mknodat(d, c, S_IFCHR, makedev(0, 0)) == 0 || errno == EEXIST) return hide_done(s, d, true);
  return hide_done(s, d, fail_errno(f, errno, "hiding in the workspace", rel));
}

static bool hide_dir(walk *w, int src, int depth);

static bool hide_entry(walk *w, int src, const struct dirent *e, int depth) {
  bool is_dir = e->d_type == DT_DIR;
  if (e->d_type == DT_UNKNOWN) {
    struct stat st;
    if (fstatat(src, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) return vanished(errno) ? true : fail_copy(w, errno, "reading workspace");
    is_dir = S_ISDIR(st.st_mode);
  }
  if (excluded(w, is_dir)) {
    if (workspace_hide_path(w->spec->src_fd, w->spec->dst_fd, w->rel, &w->out->f)) return true;
    w->out->ok = false;
    return false;
  }
  if (!is_dir || depth >= MAX_DEPTH) return true;
  int sub = openat(src, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return vanished(errno) ? true : fail_copy(w, errno, "reading workspace directory");
  return hide_dir(w, sub, depth + 1);
}

/* Walks the lower layer's directory src (which it closes) for entries to hide. */
static bool hide_dir(walk *w, int src, int depth) {
  DIR *d = fdopendir(src);
  if (!d) { close(src); return fail_copy(w, errno, "reading workspace directory"); }
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (cancelled(w)) { ok = false; break; }
    size_t back = enter(w, e->d_name);
    ok = hide_entry(w, dirfd(d), e, depth);
    atomic_fetch_add(&w->spec->job->files, 1);
    w->rel[back] = '\0';
  }
  closedir(d);
  return ok;
}

void workspace_hide(const copy_spec *spec, copy_outcome *out) {
  walk w = {.spec = spec, .out = out};
  memset(out, 0, sizeof *out);
  out->ok = true;
  if (!spec->excludes || spec->excludes->n == 0) return;
  if (excludes_all_literal(spec->excludes)) {
    for (size_t i = 0; out->ok && i < spec->excludes->n; i++)
      out->ok = workspace_hide_path(spec->src_fd, spec->dst_fd, spec->excludes->rules[i].pattern, &out->f);
    return;
  }
  int src = openat(spec->src_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (src < 0) { fail_copy(&w, errno, "workspace_sync.host_path"); return; }
  hide_dir(&w, src, 0);
}
