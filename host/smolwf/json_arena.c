/*
** The memory of cJSON in the host: one bump host_get()->json_arena, reset by each user.
**
** cJSON allocates every node and string on its own. In the host a parse
** (conn.c) or a build (command.c) lives only inside one C call, so its
** memory comes from one host_get()->json_arena that the call resets first: a pointer bump
** instead of malloc, and no free at all. What does not fit (a line with
** many members, a big env) falls back to malloc and is freed as usual.
** Hand-written because cJSON's hooks are the only allocator interface it
** has, and glibc's malloc/free per node cost a fifth of a decode
** (measured with callgrind on a 75-byte reply).
*/
#include "host.h"

#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>


static void *arena_alloc(size_t n) {
  size_t at = (host_get()->json_arena.used + 15) & ~(size_t)15;
  if (at + n <= sizeof host_get()->json_arena.buf) {
    host_get()->json_arena.used = at + n;
    return host_get()->json_arena.buf + at;
  }
  return malloc(n);
}

static void arena_free(void *p) {
  uintptr_t u = (uintptr_t)p, base = (uintptr_t)host_get()->json_arena.buf;
  if (u < base || u >= base + sizeof host_get()->json_arena.buf) free(p);
}

void json_arena_reset(void) { host_get()->json_arena.used = 0; }

void json_arena_install(void) {
  static cJSON_Hooks hooks = {arena_alloc, arena_free};
  cJSON_InitHooks(&hooks);
}
