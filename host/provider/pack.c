/*
** Packing (see pack.h).
*/
#define _GNU_SOURCE
#include "pack.h"

#include "archive_lib.h"

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

typedef struct packer {
  const archive_lib *la;
  struct archive *a;
  struct archive_entry *e;
  const pack_sink *sink;
  char *out;                  /* the chunk being filled */
  size_t out_len;
  bool sink_stopped;
  char *block;                /* READ_BLOCK bytes for reading files */
  pack_stats *st;
  failure *f;
} packer;

static bool pack_node(packer *p, int dirfd, const char *name, const char *member, int depth);

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

static bool pack_file(packer *p, int dirfd, const char *name, const char *member) {
  /* O_NONBLOCK: a FIFO swapped in after the stat must not hang the open. */
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return fail_errno(p->f, err, "read_archive", member);
  }
  bool ok = !S_ISREG(st.st_mode) || (write_header(p, &st, member, NULL) && pack_file_data(p, fd, st.st_size, member));
  close(fd);
  return ok;
}

static bool pack_symlink(packer *p, int dirfd, const char *name, const struct stat *st, const char *member) {
  char target[PATH_MAX];
  ssize_t n = readlinkat(dirfd, name ? name : "", target, sizeof target - 1);
  if (n < 0) return fail_errno(p->f, errno, "read_archive", member);
  target[n] = '\0';
  return write_header(p, st, member, target);
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

static bool pack_children(packer *p, int fd, const char *member, int depth) {
  char **names = sorted_names(fd);
  if (!names) return fail_errno(p->f, errno, "read_archive", *member ? member : ".");
  bool ok = true;
  for (size_t i = 0; ok && names[i]; i++) {
    char child[PATH_MAX];
    if (snprintf(child, sizeof child, "%s%s%s", member, *member ? "/" : "", names[i]) >= (int)sizeof child)
      ok = fail(p->f, "limit_exceeded", "read_archive `%s/%s`: name too long", member, names[i]);
    else
      ok = pack_node(p, fd, names[i], child, depth + 1);
  }
  free_names(names);
  return ok;
}

static bool pack_dir(packer *p, int dirfd, const char *name, const struct stat *st, const char *member, int depth) {
  if (depth >= MAX_DEPTH)
    return fail(p->f, "limit_exceeded", "read_archive `%s`: deeper than %d levels", member, MAX_DEPTH);
  int fd = openat(dirfd, name ? name : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_errno(p->f, errno, "read_archive", *member ? member : ".");
  bool ok = (!*member || write_header(p, st, member, NULL)) && pack_children(p, fd, member, depth);
  close(fd);
  return ok;
}

/* One path: depth 0 is an item handed in (it must exist); below, what vanished meanwhile is skipped. */
static bool pack_node(packer *p, int dirfd, const char *name, const char *member, int depth) {
  struct stat st;
  if (fstatat(dirfd, name ? name : "", &st, AT_SYMLINK_NOFOLLOW | (name ? 0 : AT_EMPTY_PATH)) < 0) {
    if (errno == ENOENT && depth > 0) return true;
    return fail_errno(p->f, errno, "read_archive", *member ? member : ".");
  }
  if (S_ISDIR(st.st_mode)) return pack_dir(p, dirfd, name, &st, member, depth);
  if (S_ISLNK(st.st_mode)) return pack_symlink(p, dirfd, name, &st, member);
  if (S_ISREG(st.st_mode)) return pack_file(p, dirfd, name, member);
  if (depth > 0) return true;
  return fail(p->f, "invalid_request", "read_archive `%s`: not a file, directory or symlink", member);
}

/* ===== the archive ===== */

static bool pack_all(packer *p, const pack_item *items, size_t n) {
  p->la->archive_write_set_format_pax(p->a);
  if (p->la->archive_write_open2(p->a, p, NULL, on_write, NULL, NULL) != ARCHIVE_OK) return write_failed(p, ".");
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) ok = pack_node(p, items[i].dirfd, items[i].name, items[i].member, 0);
  if (!ok) return false;
  if (p->la->archive_write_close(p->a) != ARCHIVE_OK || !hand_over(p)) return write_failed(p, ".");
  return true;
}

bool pack(const pack_item *items, size_t n, const pack_sink *sink, pack_stats *st, failure *f) {
  *st = (pack_stats){0};
  packer p = {.sink = sink, .st = st, .f = f};
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
