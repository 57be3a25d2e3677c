/*
** Failures (see failure.h).
*/
#define _GNU_SOURCE
#include "failure.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errcodes.h"
#include "utf8.h"

bool vfail(failure *f, const char *code, const char *fmt, va_list ap) {
  f->code = code;
  int n = vsnprintf(f->message, sizeof f->message, fmt, ap);
  if (n >= (int)sizeof f->message) f->message[utf8_complete(f->message, sizeof f->message - 1)] = '\0';
  return false;
}

bool fail(failure *f, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(f, code, fmt, ap);
  va_end(ap);
  return false;
}

bool fail_errno(failure *f, int err, const char *what, const char *path) {
  const char *code = errno_code(err);
  /* openat2 refuses a path that leaves the area with EXDEV; links it may not follow give ELOOP. */
  if (err == EXDEV) return fail(f, code, "%s `%s`: path leaves the sandbox", what, path);
  if (err == ELOOP)
    return fail(f, code, "%s `%s`: a symbolic link on the path leads out of the sandbox or may not be followed", what, path);
  return fail(f, code, "%s `%s`: %s", what, path, strerror(err));
}
