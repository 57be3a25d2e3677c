/* The arena cJSON allocates from (see json_arena.h). */
#include "json_arena.h"

#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

/* cJSON's hooks take no context, so the arena in use is found here: the one static of this module. */
static json_arena *current;

static void *arena_alloc(size_t n) {
  size_t at = (current->used + 15) & ~(size_t)15;
  if (at + n <= sizeof current->buf) {
    current->used = at + n;
    return current->buf + at;
  }
  return malloc(n);
}

static void arena_free(void *p) {
  uintptr_t u = (uintptr_t)p, base = (uintptr_t)current->buf;
  if (u < base || u >= base + sizeof current->buf) free(p);
}

void json_arena_use(json_arena *a) {
  static cJSON_Hooks hooks = {arena_alloc, arena_free};
  current = a;
  cJSON_InitHooks(a ? &hooks : NULL);
}
