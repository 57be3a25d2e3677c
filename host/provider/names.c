/*
** File names on the wire (see names.h).
*/
#define _GNU_SOURCE
#include "names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "params.h"
#include "utf8.h"

void names_add(cJSON *obj, const char *field, const char *name) {
  size_t n = strlen(name);
  if (utf8_valid(name, n, NULL)) { cJSON_AddStringToObject(obj, field, name); return; }
  char *shown = utf8_repair(name, n, NULL);
  char *exact = malloc(b64_encoded_len(n) + 1);
  if (!shown || !exact) abort();
  exact[b64_encode((const unsigned char *)name, n, exact)] = '\0';
  char key[64];
  snprintf(key, sizeof key, "%s_base64", field);
  cJSON_AddStringToObject(obj, field, shown);
  cJSON_AddStringToObject(obj, key, exact);
  free(shown);
  free(exact);
}

bool names_param(const cJSON *params, const char *field, char **out, failure *f) {
  char key[64];
  snprintf(key, sizeof key, "%s_base64", field);
  const char *text = NULL;
  if (!param_string(params, field, true, &text, f)) return false;
  if (text) { *out = strdup(text); return true; }
  size_t len;
  if (!param_base64(params, key, out, &len, f)) return false;
  if (!*out) return fail(f, "invalid_request", "missing field `%s` (or `%s`)", field, key);
  if (memchr(*out, '\0', len)) {
    free(*out);
    *out = NULL;
    return fail(f, "invalid_request", "field `%s` holds a NUL byte, which no path may contain", key);
  }
  (*out)[len] = '\0';
  return true;
}
