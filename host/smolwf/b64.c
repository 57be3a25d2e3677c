/*
** core.b64encode / core.b64decode over host/common/base64.c. Buffers are
** luaL_Buffer boxes, so a raised error (out of memory) leaks nothing.
*/
#include "host.h"

#include <lauxlib.h>

#include "base64.h"

static int core_b64encode(lua_State *L) {
  size_t n;
  const char *src = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  char *dst = luaL_buffinitsize(L, &b, b64_encoded_len(n));
  luaL_pushresultsize(&b, b64_encode((const unsigned char *)src, n, dst));
  return 1;
}

/* core.b64decode(s) -> bytes | nil, "invalid base64 at offset N" (0-based) */
static int core_b64decode(lua_State *L) {
  size_t n, out = 0;
  const char *src = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  char *dst = luaL_buffinitsize(L, &b, b64_decoded_maxlen(n) + 1);
  if (b64_decode(src, n, (unsigned char *)dst, &out) != 0) {
    luaL_pushfail(L);
    lua_pushfstring(L, "invalid base64 at offset %I", (lua_Integer)out);
    return 2;
  }
  luaL_pushresultsize(&b, out);
  return 1;
}

void b64_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"b64encode", core_b64encode}, {"b64decode", core_b64decode}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
