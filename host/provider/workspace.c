/*
** The workspace copy (see workspace.h). It walks with directory fds and
** *at() calls with O_NOFOLLOW, so a link in the tree is never followed,
** whatever it points to, and a link swapped in mid-walk fails the open
** instead of leading elsewhere.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workspace.h"

#include "errcodes.h"
#include "paths.h"

/* Deeper trees are refused: each level holds two fds while it is copied. */
#define MAX_DEPTH 256

/*
** What one copy needs besides the two trees: the directories never to
** enter (by identity) and where a failure goes.
*/
typedef struct copy_ctx {
  const file_id *skip;
  size_t nskip;
  failure *f;
} copy_ctx;

/*
** The Cache Directory Tagging Specification
** (https://bford.info/cachedir/): a directory holding a file CACHEDIR.TAG
** that starts with this signature holds only what can be made again. The
** workflow engine tags its `.smolwf/` report root this way, so the reports
** of earlier runs do not nest into the workspace of later ones.
*/
#define CACHEDIR_SIGNATURE "Signature: 8a477f597d28d172789f06886806bc55"

static bool copy_dir(int src, int dst, const char *where, int depth, copy_ctx *c);

/*
** A file or directory the provider may not read makes the whole open fail
** (a partial workspace would be worse), with a message saying what to fix.
*/
static bool fail_copy(copy_ctx *c, int err, const char *what, const char *where) {
  if (err != EACCES && err != EPERM) return fail_errno(c->f, err, what, where);
  return fail(c->f, errno_code(err),
              "workspace_sync.host_path: `%s` is unreadable by the provider (uid %ld): %s; "
              "make it readable, or move it out of the workspace", where, (long)geteuid(), strerror(err));
}

static bool copy_data(int in, int out, const char *where, copy_ctx *c) {
  for (;;) {
    ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
    if (n == 0) return true;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS)
      return fail_copy(c, errno, "copying workspace file", where);
    break;   /* no in-kernel copy between these file systems: plain read/write */
  }
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || write(out, buf, (size_t)n) != n)
      return fail_copy(c, errno ? errno : EIO, "copying workspace file", where);
  }
}

static void keep_times(int fd, const struct stat *st) {
  struct timespec times[2] = {st->st_atim, st->st_mtim};
  futimens(fd, times);
}

static bool copy_file(int src, int dst, const char *name, const struct stat *st, const char *where, copy_ctx *c) {
  /* O_NONBLOCK: a file swapped for a FIFO since its stat must not block the open */
  int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (in < 0) return fail_copy(c, errno, "reading workspace file", where);
  struct stat now;
  if (fstat(in, &now) < 0 || !S_ISREG(now.st_mode)) { close(in); return true; }   /* no longer a file: skipped */
  int out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) { close(in); return fail_errno(c->f, errno, "creating workspace file", where); }
  bool ok = copy_data(in, out, where, c);
  if (ok) { fchmod(out, st->st_mode & 07777); keep_times(out, st); }
  close(in);
  close(out);
  return ok;
}

static bool copy_link(int src, int dst, const char *name, const char *where, copy_ctx *c) {
  char target[PATH_MAX];
  ssize_t n = readlinkat(src, name, target, sizeof target - 1);
  if (n < 0) return fail_copy(c, errno, "reading workspace link", where);
  target[n] = '\0';
  if (symlinkat(target, dst, name) < 0) return fail_errno(c->f, errno, "creating workspace link", where);
  return true;
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
static bool skipped(const copy_ctx *c, const struct stat *st) {
  for (size_t i = 0; i < c->nskip; i++)
    if (c->skip[i].dev == st->st_dev && c->skip[i].ino == st->st_ino) return true;
  return false;
}

static bool copy_subdir(int src, int dst, const char *name, const struct stat *st, const char *where,
                        int depth, copy_ctx *c) {
  if (skipped(c, st)) return true;
  if (depth >= MAX_DEPTH) return fail(c->f, "limit_exceeded", "workspace `%s`: deeper than %d levels", where, MAX_DEPTH);
  int in = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return fail_copy(c, errno, "reading workspace directory", where);
  if (is_cache_dir(in)) { close(in); return true; }
  if (mkdirat(dst, name, 0700) < 0) { close(in); return fail_errno(c->f, errno, "creating workspace directory", where); }
  int out = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (out < 0) { close(in); return fail_errno(c->f, errno, "opening workspace directory", where); }
  bool ok = copy_dir(in, out, where, depth + 1, c);   /* takes `in` */
  /* The mode last: a read-only directory must still take its entries first. */
  if (ok) { fchmod(out, st->st_mode & 07777); keep_times(out, st); }
  close(out);
  return ok;
}

static bool copy_entry(int src, int dst, const char *name, const char *dir, int depth, copy_ctx *c) {
  char where[PATH_MAX];
  path_join(where, dir, name);
  struct stat st;
  if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return fail_copy(c, errno, "reading workspace", where);
  if (S_ISDIR(st.st_mode)) return copy_subdir(src, dst, name, &st, where, depth, c);
  if (S_ISREG(st.st_mode)) return copy_file(src, dst, name, &st, where, c);
  if (S_ISLNK(st.st_mode)) return copy_link(src, dst, name, where, c);
  return true;   /* sockets, fifos, devices: nothing a workspace needs */
}

/* Copies the entries of src (which it closes) into dst. */
static bool copy_dir(int src, int dst, const char *where, int depth, copy_ctx *c) {
  DIR *d = fdopendir(src);
  if (!d) { close(src); return fail_copy(c, errno, "reading workspace directory", where); }
  bool ok = true;
  errno = 0;
  for (struct dirent *e; ok && (e = readdir(d)); errno = 0) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    ok = copy_entry(src, dst, e->d_name, where, depth, c);
  }
  if (ok && errno) ok = fail_copy(c, errno, "reading workspace directory", where);
  closedir(d);
  return ok;
}

bool workspace_copy(const char *host_path, int dst_fd, const file_id *skip, size_t nskip, failure *f) {
  if (!host_path || !*host_path) return true;
  copy_ctx c = {skip, nskip, f};
  /* The top itself may be a link the user named; everything below is never followed. */
  int src = open(host_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (src < 0 && (errno == EACCES || errno == EPERM)) return fail_copy(&c, errno, "", host_path);
  if (src < 0) return fail_errno(f, errno, "workspace_sync.host_path", host_path);
  int dst = openat(dst_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dst < 0) { close(src); return fail_errno(f, errno, "opening session workspace", "."); }
  bool ok = copy_dir(src, dst, host_path, 0, &c);
  close(dst);
  return ok;
}
