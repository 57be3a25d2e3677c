/*
** Opening regular files without blocking (see file_open.h).
*/
#define _GNU_SOURCE
#include "file_open.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* Never blocks in open(2); O_NONBLOCK does not change reads and writes of regular files. */
#define OPEN_FLAGS (O_NONBLOCK | O_NOCTTY)

static const char *kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

static bool fail_special(failure *f, const char *what, const resolved *p, const char *kind) {
  return fail(f, "invalid_request", "%s `%s`: %s, not a regular file (file operations read and write regular files only)",
              what, p->given, kind);
}

/* Why an open failed: the lease and the FIFO without a reader said as such, the rest by errno. */
static bool fail_open(failure *f, int err, const char *what, const resolved *p) {
  if (err == EWOULDBLOCK)
    return fail(f, "io_error", "%s `%s`: another process holds a lease on the file; it must release it first",
                what, p->given);
  if (err == ENXIO) return fail_special(f, what, p, "a FIFO (named pipe) or device");
  return fail_errno(f, err, what, p->given);
}

/* fd's file is regular (st filled), or fd is closed and f says what it is. */
static bool check_regular(int fd, const char *what, const resolved *p, struct stat *st, failure *f) {
  if (fstat(fd, st) < 0) {
    int err = errno;
    close(fd);
    return fail_errno(f, err, what, p->given);
  }
  if (S_ISREG(st->st_mode)) return true;
  close(fd);
  if (S_ISDIR(st->st_mode)) return fail_errno(f, EISDIR, what, p->given);
  return fail_special(f, what, p, kind_of(st->st_mode));
}

int file_open_read(const resolved *p, const char *what, struct stat *st, failure *f) {
  int fd = path_open(p, O_RDONLY | OPEN_FLAGS, 0);
  if (fd < 0) return fail_open(f, -fd, what, p), -1;
  return check_regular(fd, what, p, st, f) ? fd : -1;
}

int file_open_write(const resolved *p, const char *what, bool append, mode_t mode, failure *f) {
  int fd = path_open(p, O_WRONLY | O_CREAT | O_EXCL | OPEN_FLAGS, 0600);
  if (fd >= 0) { fchmod(fd, mode); return fd; }
  if (fd != -EEXIST) return fail_open(f, -fd, what, p), -1;
  fd = path_open(p, O_WRONLY | (append ? O_APPEND : 0) | OPEN_FLAGS, 0);
  if (fd < 0) return fail_open(f, -fd, what, p), -1;
  struct stat st;
  if (!check_regular(fd, what, p, &st, f)) return -1;
  /* Truncated only now that it is known to be a regular file: O_TRUNC would act before the check. */
  if (!append && ftruncate(fd, 0) < 0) {
    int err = errno;
    close(fd);
    return fail_errno(f, err, what, p->given), -1;
  }
  return fd;
}
