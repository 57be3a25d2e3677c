/*
** Packing (see pack.h).
*/
#define _GNU_SOURCE
#include "pack.h"

#include "archive_lib.h"
#include "paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper trees are refused (each level holds a directory fd), as the workspace copy refuses them. */
#define MAX_DEPTH 256
/* How much of a file is read at once. */
#define READ_BLOCK (256u * 1024)
/* Symlinks followed on one path at most (follow_links): past it, a loop. */
#define MAX_LINKS 8

typedef struct packer {
  const archive_lib *la;
  struct archive *a;
  struct archive_entry *e;
  const pack_sink *sink;
  char *out;                  /* the chunk being filled */
  size_t out_len;
  bool sink_stopped;
  bool follow_links;
  char *block;                /* READ_BLOCK bytes for reading files */
  pack_stats *st;
  failure *f;
} packer;

/* A path being packed: where it is, its entry name, its path beneath its area (to follow links from). */
typedef struct node {
  int area_fd;
  int dirfd;                  /* the directory holding it */
  const char *name;           /* its name there; NULL: dirfd itself */
  const char *member;
  const char *rel;
  int depth, links;           /* levels below the item handed in; symlinks followed on the way */
} node;

static bool pack_node(packer *p, const node *n);

/* ===== the output ===== */

static bool hand_over(packer *p) {
  if (p->out_len == 0) return true;
  char *data = p->out;
  size_t len = p->out_len;
  p->out = NULL;
  p->out_len = 0;
  p->st->bytes += len;
  if (!p->sink->take(p->sink->ctx, data, len)) p->sink_stopped = true;
  return !p->sink_stopped;
}

/* libarchive's blocks (10 KiB) gathered into chunks of PACK_CHUNK. */
static la_ssize_t on_write(struct archive *a, void *ctx, const void *data, size_t len) {
  packer *p = ctx;
  if (p->sink_stopped) {
    p->la->archive_set_error(a, ECANCELED, "packing was stopped");
    return -1;
  }
  for (size_t done = 0; done < len;) {
    if (!p->out && !(p->out = malloc(PACK_CHUNK))) abort();
    size_t n = len - done < PACK_CHUNK - p->out_len ? len - done : PACK_CHUNK - p->out_len;
    memcpy(p->out + p->out_len, (const char *)data + done, n);
    p->out_len += n;
    done += n;
    if (p->out_len == PACK_CHUNK && !hand_over(p)) {
      p->la->archive_set_error(a, ECANCELED, "packing was stopped");
      return -1;
    }
  }
  return (la_ssize_t)len;
}

static bool write_failed(packer *p, const char *member) {
  if (p->sink_stopped) return fail(p->f, "io_error", "read_archive: stopped");
  return fail(p->f, "io_error", "read_archive `%s`: %s", member, p->la->archive_error_string(p->a));
}

/* ===== entries ===== */

static bool write_header(packer *p, const struct stat *st, const char *member, const char *link) {
  p->la->archive_entry_clear(p->e);
  p->la->archive_entry_set_pathname(p->e, member);
  p->la->archive_entry_set_filetype(p->e, st->st_mode & S_IFMT);
  p->la->archive_entry_set_perm(p->e, st->st_mode & 07777);
  p->la->archive_entry_set_size(p->e, S_ISREG(st->st_mode) ? st->st_size : 0);
  p->la->archive_entry_set_mtime(p->e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
  if (link) p->la->archive_entry_set_symlink(p->e, link);
  if (p->la->archive_write_header(p->a, p->e) != ARCHIVE_OK) return write_failed(p, member);
  p->st->entries++;
  return true;
}

/* The file's bytes up to the size in its header; a file that shrank meanwhile is padded with zeros by libarchive. */
static bool pack_file_data(packer *p, int fd, off_t size, const char *member) {
  for (off_t done = 0; done < size;) {
    size_t want = size - done < (off_t)READ_BLOCK ? (size_t)(size - done) : READ_BLOCK;
    ssize_t n = read(fd, p->block, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(p->f, errno, "read_archive", member);
    if (n == 0) break;
    if (p->la->archive_write_data(p->a, p->block, (size_t)n) < 0) return write_failed(p, member);
    done += n;
  }
  return true;
}

/* The regular file open at fd (closed here): its header and bytes; anything else is left out. */
static bool pack_open_file(packer *p, int fd, const char *member) {
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int err = errno;
    close(fd);
    return fail_errno(p->f, err, "read_archive", member);
  }
  bool ok = !S_ISREG(st.st_mode) || (write_header(p, &st, member, NULL) && pack_file_data(p, fd, st.st_size, member));
  close(fd);
  return ok;
}

static bool pack_file(packer *p, const node *n) {
  /* O_NONBLOCK: a FIFO swapped in after the stat must not hang the open. */
  int fd = openat(n->dirfd, n->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail_errno(p->f, errno, "read_archive", n->member);
  return pack_open_file(p, fd, n->member);
}

static bool pack_symlink(packer *p, const node *n, const struct stat *st) {
  char target[PATH_MAX];
  ssize_t len = readlinkat(n->dirfd, n->name ? n->name : "", target, sizeof target - 1);
  if (len < 0) return fail_errno(p->f, errno, "read_archive", n->member);
  target[len] = '\0';
  return write_header(p, st, n->member, target);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in the directory open at fd (which it keeps), sorted; NULL-terminated, or NULL with errno. */
static char **sorted_names(int fd) {
  int again = dup(fd);
  DIR *d = again < 0 ? NULL : fdopendir(again);
  if (!d) { if (again >= 0) close(again); return NULL; }
  size_t n = 0, cap = 16;
  char **names = malloc(cap * sizeof *names);
  for (struct dirent *e; names && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (n + 1 == cap && !(names = realloc(names, (cap *= 2) * sizeof *names))) abort();
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (!names) abort();
  names[n] = NULL;
  qsort(names, n, sizeof *names, by_name);
  return names;
}

static void free_names(char **names) {
  for (size_t i = 0; names[i]; i++) free(names[i]);
  free(names);
}

/* "a" + "b" -> "a/b" ("" + "b" -> "b") into out (PATH_MAX); false when too long. */
static bool join(char *out, const char *dir, const char *name) {
  bool top = !*dir || strcmp(dir, ".") == 0;
  return snprintf(out, PATH_MAX, "%s%s%s", top ? "" : dir, top ? "" : "/", name) < PATH_MAX;
}

static bool pack_children(packer *p, int fd, const node *n) {
  char **names = sorted_names(fd);
  if (!names) return fail_errno(p->f, errno, "read_archive", *n->member ? n->member : ".");
  bool ok = true;
  for (size_t i = 0; ok && names[i]; i++) {
    char member[PATH_MAX], rel[PATH_MAX];
    node child = {n->area_fd, fd, names[i], member, rel, n->depth + 1, n->links};
    if (!join(member, n->member, names[i]) || !join(rel, n->rel, names[i]))
      ok = fail(p->f, "limit_exceeded", "read_archive `%s/%s`: name too long", n->member, names[i]);
    else
      ok = pack_node(p, &child);
  }
  free_names(names);
  return ok;
}

static bool pack_dir(packer *p, const node *n, const struct stat *st) {
  if (n->depth >= MAX_DEPTH)
    return fail(p->f, "limit_exceeded", "read_archive `%s`: deeper than %d levels", n->member, MAX_DEPTH);
  int fd = openat(n->dirfd, n->name ? n->name : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_errno(p->f, errno, "read_archive", *n->member ? n->member : ".");
  bool ok = (!*n->member || write_header(p, st, n->member, NULL)) && pack_children(p, fd, n);
  close(fd);
  return ok;
}

/*
** A symlink packed as what it points to (follow_links): resolved again
** from its area's fd with the kernel walking the link beneath the area
** (paths.h), so a link that leads out of the session, or to nothing, fails.
*/
static bool pack_followed(packer *p, const node *n) {
  if (n->links >= MAX_LINKS)
    return fail(p->f, "invalid_request", "read_archive: symlink `%s`: too many levels of symbolic links (a loop?)",
                n->member);
  int fd = open_beneath(n->area_fd, n->rel, O_PATH, 0);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    int err = fd < 0 ? -fd : errno;
    if (fd >= 0) close(fd);
    return fail(p->f, err == ENOENT ? "not_found" : "permission_denied", "read_archive: symlink `%s` points outside "
                "the sandbox or to nothing", n->member);
  }
  node target = {n->area_fd, fd, NULL, n->member, n->rel, n->depth, n->links + 1};
  bool ok = true;
  if (S_ISDIR(st.st_mode)) ok = pack_dir(p, &target, &st);
  else if (S_ISREG(st.st_mode)) {
    int file = open_beneath(n->area_fd, n->rel, O_RDONLY | O_NONBLOCK, 0);
    ok = file >= 0 ? pack_open_file(p, file, n->member) : fail_errno(p->f, -file, "read_archive", n->member);
  }
  close(fd);
  return ok;
}

/* One path: depth 0 is an item handed in (it must exist); below, what vanished meanwhile is skipped. */
static bool pack_node(packer *p, const node *n) {
  struct stat st;
  if (fstatat(n->dirfd, n->name ? n->name : "", &st, AT_SYMLINK_NOFOLLOW | (n->name ? 0 : AT_EMPTY_PATH)) < 0) {
    if (errno == ENOENT && n->depth > 0) return true;
    return fail_errno(p->f, errno, "read_archive", *n->member ? n->member : ".");
  }
  if (S_ISDIR(st.st_mode)) return pack_dir(p, n, &st);
  if (S_ISLNK(st.st_mode)) return p->follow_links ? pack_followed(p, n) : pack_symlink(p, n, &st);
  if (S_ISREG(st.st_mode)) return pack_file(p, n);
  if (n->depth > 0) return true;
  return fail(p->f, "invalid_request", "read_archive `%s`: not a file, directory or symlink", n->member);
}

/* ===== the archive ===== */

static bool pack_all(packer *p, const pack_item *items, size_t n) {
  p->la->archive_write_set_format_pax(p->a);
  if (p->la->archive_write_open2(p->a, p, NULL, on_write, NULL, NULL) != ARCHIVE_OK) return write_failed(p, ".");
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) {
    node top = {items[i].area_fd, items[i].dirfd, items[i].name, items[i].member, items[i].rel, 0, 0};
    ok = pack_node(p, &top);
  }
  if (!ok) return false;
  if (p->la->archive_write_close(p->a) != ARCHIVE_OK || !hand_over(p)) return write_failed(p, ".");
  return true;
}

bool pack(const pack_item *items, size_t n, bool follow_links, const pack_sink *sink, pack_stats *st, failure *f) {
  *st = (pack_stats){0};
  packer p = {.sink = sink, .st = st, .f = f, .follow_links = follow_links};
  if (!(p.la = archive_lib_get(f))) return false;
  p.a = p.la->archive_write_new();
  p.e = p.la->archive_entry_new();
  p.block = malloc(READ_BLOCK);
  if (!p.a || !p.e || !p.block) abort();
  bool ok = pack_all(&p, items, n);
  p.sink_stopped = true;   /* freeing closes the archive: after a failure, its last blocks go nowhere */
  p.la->archive_entry_free(p.e);
  p.la->archive_write_free(p.a);
  free(p.block);
  free(p.out);
  return ok;
}
