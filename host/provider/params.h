/*
** Reading request parameters with errors that name the method and field,
** and the failure value every handler fills when it cannot do its job.
*/
#ifndef SMOL_PARAMS_H
#define SMOL_PARAMS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* Why a request failed: a protocol error code and a message for people. */
typedef struct failure {
  const char *code;
  char message[1024];
} failure;

/* Fills f and returns false, so a check can end with `return fail(...)`. */
bool fail(failure *f, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* Fills f from an errno value, naming what and path: "read_file `a/b`: ...". */
bool fail_errno(failure *f, int err, const char *what, const char *path);

#include "errcodes.h"   /* errno_code: the protocol error code for an errno value */

/*
** Field readers. `optional` fields may be absent or null (then *out keeps
** its value). A wrong type fails with invalid_request naming the field.
*/
bool param_string(const cJSON *obj, const char *field, bool optional, const char **out, failure *f);
bool param_uint(const cJSON *obj, const char *field, uint64_t *out, failure *f);
bool param_bool(const cJSON *obj, const char *field, bool *out, failure *f);
bool param_object(const cJSON *obj, const char *field, const cJSON **out, failure *f);

/* Decodes the base64 in field (absent/null: *out = NULL, *len = 0). Caller frees *out. */
bool param_base64(const cJSON *obj, const char *field, char **out, size_t *len, failure *f);

/* A NULL-terminated copy of a JSON array of strings (argv). Caller frees with strv_free. */
bool param_strv(const cJSON *obj, const char *field, char ***out, failure *f);
void strv_free(char **v);

#endif
