/*
** The checks of json_rules.h.
*/
#define _GNU_SOURCE   /* memmem */
#include "json_rules.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Objects with more members than this are checked by sorting their keys; fewer, pair by pair. */
#define FEW_MEMBERS 8

static int by_key(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static const char *duplicate_in_sorted(const cJSON *obj, size_t n) {
  const cJSON **keys = malloc(n * sizeof *keys);
  if (!keys) abort();
  size_t i = 0;
  for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c;
  qsort(keys, n, sizeof *keys, by_key);
  const char *dup = NULL;
  for (i = 1; i < n && !dup; i++)
    if (strcmp(keys[i - 1]->string, keys[i]->string) == 0) dup = keys[i]->string;
  free(keys);
  return dup;
}

/* The first key that occurs twice in obj's own members (not nested), or NULL. */
static const char *duplicate_member(const cJSON *obj) {
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n++;
  if (n > FEW_MEMBERS) return duplicate_in_sorted(obj, n);
  for (const cJSON *a = obj->child; a; a = a->next)
    for (const cJSON *b = a->next; b; b = b->next)
      if (strcmp(a->string, b->string) == 0) return a->string;
  return NULL;
}

const char *json_duplicate_key(const cJSON *v) {
  if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
  if (cJSON_IsObject(v) && v->child && v->child->next) {   /* one member cannot repeat */
    const char *dup = duplicate_member(v);
    if (dup) return dup;
  }
  for (const cJSON *c = v->child; c; c = c->next) {
    if (!c->child) continue;   /* a scalar, or an empty array or object */
    const char *dup = json_duplicate_key(c);
    if (dup) return dup;
  }
  return NULL;
}

size_t json_each_nul_escape(char *line, size_t len, void (*fn)(char *line, size_t at)) {
  if (!memmem(line, len, "\\u0000", 6)) return 0;   /* the common case, found at memmem's speed */
  size_t found = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < len; i++) {
    char c = line[i];
    if (!in_string) { in_string = c == '"'; continue; }
    if (escaped) {
      escaped = false;
      if (c == 'u' && i + 4 < len && memcmp(line + i + 1, "0000", 4) == 0) {
        found++;
        if (fn) fn(line, i);
      }
    } else if (c == '\\') {
      escaped = true;
    } else if (c == '"') {
      in_string = false;
    }
  }
  return found;
}
