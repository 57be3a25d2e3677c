/*
** Reading request parameters, with failures that name the field.
*/
#ifndef SMOL_PARAMS_H
#define SMOL_PARAMS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "failure.h"

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
