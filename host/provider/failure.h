/*
** The error value: why a request failed, as the protocol says it (a code
** from the protocol's list and a message for people that names the
** method, field or path). Every handler that cannot do its job fills one;
** reply_failure (reply.h) sends it.
*/
#ifndef SMOL_FAILURE_H
#define SMOL_FAILURE_H

#include <stdarg.h>
#include <stdbool.h>

typedef struct failure {
  const char *code;        /* "invalid_request", "not_found", ... (docs/protocol.md, errors) */
  char message[1024];
} failure;

/*
** Fills f and returns false, so a check can end with `return fail(...)`.
** A message too long for f is cut at a character boundary.
*/
bool fail(failure *f, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
bool vfail(failure *f, const char *code, const char *fmt, va_list ap)
  __attribute__((format(printf, 3, 0)));

/* Fills f from an errno value, naming what and path: "read_file `a/b`: ...". */
bool fail_errno(failure *f, int err, const char *what, const char *path);

#endif
