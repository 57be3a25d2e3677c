/*
** Parameter readers (see params.h).
*/
#define _GNU_SOURCE
#include "params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"

static const cJSON *field_value(const cJSON *obj, const char *field) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

bool param_string(const cJSON *obj, const char *field, bool optional, const char **out, failure *f) {
  const cJSON *v = field_value(obj, field);
  if (!v) return optional ? true : fail(f, "invalid_request", "missing field `%s`", field);
  if (!cJSON_IsString(v)) return fail(f, "invalid_request", "field `%s` must be a string", field);
  *out = v->valuestring;
  return true;
}

bool param_uint(const cJSON *obj, const char *field, uint64_t *out, failure *f) {
  const cJSON *v = field_value(obj, field);
  if (!v) return true;
  double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
  if (d < 0 || d != floor(d) || d > 9007199254740992.0)
    return fail(f, "invalid_request", "field `%s` must be a non-negative integer", field);
  *out = (uint64_t)d;
  return true;
}

bool param_bool(const cJSON *obj, const char *field, bool *out, failure *f) {
  const cJSON *v = field_value(obj, field);
  if (!v) return true;
  if (!cJSON_IsBool(v)) return fail(f, "invalid_request", "field `%s` must be a boolean", field);
  *out = cJSON_IsTrue(v);
  return true;
}

bool param_object(const cJSON *obj, const char *field, const cJSON **out, failure *f) {
  const cJSON *v = field_value(obj, field);
  if (!v) return true;
  if (!cJSON_IsObject(v)) return fail(f, "invalid_request", "field `%s` must be an object", field);
  *out = v;
  return true;
}

bool param_base64(const cJSON *obj, const char *field, char **out, size_t *len, failure *f) {
  const char *text = NULL;
  *out = NULL;
  *len = 0;
  if (!param_string(obj, field, true, &text, f)) return false;
  if (!text) return true;
  size_t n = strlen(text);
  char *data = malloc(b64_decoded_maxlen(n) + 1);
  if (!data) return fail(f, "limit_exceeded", "field `%s`: out of memory", field);
  size_t outlen;
  if (b64_decode(text, n, (unsigned char *)data, &outlen) < 0) {
    free(data);
    return fail(f, "invalid_request", "field `%s`: invalid base64 at offset %zu", field, outlen);
  }
  *out = data;
  *len = outlen;
  return true;
}

void strv_free(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

bool param_strv(const cJSON *obj, const char *field, char ***out, failure *f) {
  const cJSON *v = field_value(obj, field);
  if (!v || !cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
    return fail(f, "invalid_request", "field `%s` must be a non-empty array of strings", field);
  size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
  char **strv = calloc(n + 1, sizeof *strv);
  const cJSON *item;
  cJSON_ArrayForEach(item, v) {
    if (!cJSON_IsString(item)) {
      strv_free(strv);
      return fail(f, "invalid_request", "field `%s`: item %zu is not a string", field, i + 1);
    }
    strv[i++] = strdup(item->valuestring);
  }
  *out = strv;
  return true;
}
