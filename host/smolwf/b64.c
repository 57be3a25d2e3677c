/*
** core.b64encode / core.b64decode over host/common/base64.c.
** Encoding uses a luaL_Buffer box, so a raised error (out of memory) leaks
** nothing. Decoding a payload of streamed output is on the host's hot path
** (every stdout event of every exec), so it decodes a range of its string
** (no string.sub copy of the payload first) into a host_get()->b64 buffer that is
** kept between calls (no allocation per event), then makes the Lua string.
*/
#include "host.h"

#include <stdlib.h>

#include <lauxlib.h>

#include "base64.h"

/* Decoded results up to this size reuse the host_get()->b64 buffer; bigger ones
** (a large read_file) get a buffer of their own, not kept afterwards. */
#define SCRATCH_MAX ((size_t)4 << 20)


static int core_b64encode(lua_State *L) {
  size_t n;
  const char *src = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  char *dst = luaL_buffinitsize(L, &b, b64_encoded_len(n));
  luaL_pushresultsize(&b, b64_encode((const unsigned char *)src, n, dst));
  return 1;
}

/* String position p as string.sub reads it (negative counts from the end), clamped to 0..len+1. */
static size_t position(lua_Integer p, size_t len) {
  if (p > 0) return (size_t)p > len ? len + 1 : (size_t)p;
  if (p == 0) return 0;
  if (p < -(lua_Integer)len) return 0;
  return len + (size_t)p + 1;
}

/* The host_get()->b64 buffer with room for n bytes, or NULL when n is too big for it or memory is short. */
static unsigned char *scratch_for(size_t n) {
  if (n > SCRATCH_MAX) return NULL;
  if (n > host_get()->b64.cap) {
    size_t cap = n < 256 * 1024 ? 256 * 1024 : n;
    unsigned char *p = realloc(host_get()->b64.buf, cap);
    if (p == NULL) return NULL;
    host_get()->b64.buf = p;
    host_get()->b64.cap = cap;
  }
  return host_get()->b64.buf;
}

/* Pushes the decoded bytes or fail + message; returns the number of results. */
static int push_decoded(lua_State *L, const char *src, size_t n, unsigned char *dst, luaL_Buffer *b) {
  size_t out = 0;
  if (b64_decode(src, n, dst, &out) != 0) {
    luaL_pushfail(L);
    lua_pushfstring(L, "invalid base64 at offset %I", (lua_Integer)out);
    return 2;
  }
  if (b != NULL) luaL_pushresultsize(b, out);
  else lua_pushlstring(L, (const char *)dst, out);  /* may raise; host_get()->b64 is static: no leak */
  return 1;
}

/*
** core.b64decode(s [, i [, j]]) -> bytes | nil, "invalid base64 at offset N"
** Decodes s:sub(i, j) (same positions as string.sub; default the whole
** string) without making that substring. N is 0-based within the range.
*/
static int core_b64decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  size_t i = position(luaL_optinteger(L, 2, 1), len);
  size_t j = position(luaL_optinteger(L, 3, -1), len);
  if (i < 1) i = 1;
  if (j > len) j = len;
  size_t n = i <= j ? j - i + 1 : 0;
  const char *src = s + i - 1;
  unsigned char *dst = scratch_for(b64_decoded_maxlen(n) + 1);
  if (dst != NULL) return push_decoded(L, src, n, dst, NULL);
  luaL_Buffer b;
  dst = (unsigned char *)luaL_buffinitsize(L, &b, b64_decoded_maxlen(n) + 1);
  return push_decoded(L, src, n, dst, &b);
}

int b64_push(lua_State *L, const char *src, size_t n) {
  unsigned char *dst = scratch_for(b64_decoded_maxlen(n) + 1);
  size_t out = 0;
  if (dst != NULL) {
    if (b64_decode(src, n, dst, &out) != 0) return 0;
    lua_pushlstring(L, (const char *)dst, out);
    return 1;
  }
  luaL_Buffer b;
  dst = (unsigned char *)luaL_buffinitsize(L, &b, b64_decoded_maxlen(n) + 1);
  if (b64_decode(src, n, dst, &out) != 0) {
    luaL_pushresultsize(&b, 0);
    lua_pop(L, 1);
    return 0;
  }
  luaL_pushresultsize(&b, out);
  return 1;
}

/*
** Decodes the n base64 characters at s over themselves (the decoder's
** writes never overtake its reads: each quantum's bytes go where earlier
** characters were); *out: the decoded length. The text is checked first,
** a slice at a time through the scratch buffer, so that nothing is
** overwritten when it is not valid (-1). For a payload too big to copy.
*/
int b64_decode_in_place(char *s, size_t n, size_t *out) {
  enum { SLICE = 48 * 1024 };   /* a multiple of 4 */
  unsigned char *scratch = scratch_for(SLICE);
  if (scratch == NULL || n % 4 != 0) return -1;
  for (size_t at = 0; at < n; at += SLICE) {
    size_t m = n - at < SLICE ? n - at : SLICE, got;
    if (b64_decode(s + at, m, scratch, &got) != 0) return -1;
    if (at + m < n && got != m / 4 * 3) return -1;   /* padding before the end */
  }
  return b64_decode(s, n, (unsigned char *)s, out);
}

int b64_push_or_why(lua_State *L, const char *src, size_t n) {
  if (b64_push(L, src, n)) return 1;
  unsigned char *dst = scratch_for(b64_decoded_maxlen(n) + 1);
  size_t at = 0;
  if (dst != NULL) b64_decode(src, n, dst, &at);
  lua_pushfstring(L, "invalid base64 at offset %I", (lua_Integer)at);
  return 0;
}

void b64_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"b64encode", core_b64encode}, {"b64decode", core_b64decode}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
