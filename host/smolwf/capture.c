/*
** core.capture(limit): what exec keeps of one output stream, its first
** `limit` bytes, in a buffer of its own outside the Lua heap.
**
**   local c = core.capture(limit)
**   c:append(bytes)                 -- keeps what still fits
**   local s, truncated = c:take()   -- the bytes as one string (truncated:
**                                   -- true when more was appended than fit,
**                                   -- else nil); the capture is empty after
**
** Why not a Lua table of chunks and table.concat: capturing 64 MiB that
** way peaked at ~3.6x the cap (bench/capture_bench.lua, 300 MB of output:
** VmHWM 236 MiB). The kept chunks grew the live Lua heap, so the garbage
** collector let the discarded chunks pile up about as high again, and
** table.concat's buffer doubled past the result and then copied it once
** more. Here the kept bytes are not Lua objects, so the collector paces
** itself on a small heap, and the buffer grows with realloc (large blocks
** move by remapping, not copying). The one copy left is take's string.
** The buffer is freed by take, or by __gc when the request failed.
*/
#include "host.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#define CAPTURE_MT "smol.capture"
#define FIRST_CAP ((size_t)64 * 1024)

struct capture {
  char *data;
  size_t len, cap, limit;
  int truncated, closed;
};

static capture *check_capture(lua_State *L) {
  capture *c = luaL_checkudata(L, 1, CAPTURE_MT);
  if (c->closed) luaL_error(L, "attempt to use a closed capture");
  return c;
}

/* Room for `need` bytes in all: doubles, but never past the limit. */
static int reserve(capture *c, size_t need) {
  if (need <= c->cap) return 1;
  size_t cap = c->cap ? c->cap : FIRST_CAP;
  while (cap < need) cap = cap > c->limit / 2 ? c->limit : cap * 2;
  if (cap > c->limit) cap = c->limit;
  char *data = realloc(c->data, cap);
  if (data == NULL) return 0;
  c->data = data;
  c->cap = cap;
  return 1;
}

int capture_add(capture *c, const char *bytes, size_t n) {
  size_t room = c->limit - c->len;
  if (n > room) { c->truncated = 1; n = room; }
  if (n == 0) return 1;
  if (!reserve(c, c->len + n)) return 0;
  memcpy(c->data + c->len, bytes, n);
  c->len += n;
  return 1;
}

static int capture_append(lua_State *L) {
  capture *c = check_capture(L);
  size_t n;
  const char *bytes = luaL_checklstring(L, 2, &n);
  if (!capture_add(c, bytes, n)) return luaL_error(L, "not enough memory to capture output");
  return 0;
}

int capture_push_taken(lua_State *L, int idx) {
  capture *c = lua_touserdata(L, idx);
  lua_pushlstring(L, c->data ? c->data : "", c->len);   /* may raise: __gc still frees */
  int truncated = c->truncated;
  free(c->data);
  c->data = NULL;
  c->len = c->cap = 0;
  c->truncated = 0;
  return truncated;
}

static int capture_take(lua_State *L) {
  check_capture(L);
  if (capture_push_taken(L, 1)) lua_pushboolean(L, 1);
  else lua_pushnil(L);
  return 2;
}

/* __gc and __close: the kept bytes go; idempotent */
static int capture_gc(lua_State *L) {
  capture *c = luaL_checkudata(L, 1, CAPTURE_MT);
  free(c->data);
  c->data = NULL;
  c->closed = 1;
  return 0;
}

static int capture_tostring(lua_State *L) {
  capture *c = luaL_checkudata(L, 1, CAPTURE_MT);
  if (c->closed) lua_pushliteral(L, "smol.capture (closed)");
  else lua_pushfstring(L, "smol.capture (%I of %I bytes)", (lua_Integer)c->len, (lua_Integer)c->limit);
  return 1;
}

/* The limit: a non-negative integer, or math.huge for none. */
static size_t check_limit(lua_State *L) {
  lua_Number limit = luaL_checknumber(L, 1);
  luaL_argcheck(L, limit >= 0 && floor(limit) == limit, 1, "limit must be a non-negative integer");
  return limit >= (lua_Number)SIZE_MAX ? SIZE_MAX : (size_t)limit;
}

capture *capture_push(lua_State *L, size_t limit) {
  capture *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  c->limit = limit;
  luaL_setmetatable(L, CAPTURE_MT);
  return c;
}

static int core_capture(lua_State *L) {
  capture_push(L, check_limit(L));
  return 1;
}

void capture_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"append", capture_append}, {"take", capture_take}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
    {"__gc", capture_gc}, {"__close", capture_gc}, {"__tostring", capture_tostring}, {NULL, NULL}};
  host_class(L, CAPTURE_MT, methods, meta);
  lua_pushcfunction(L, core_capture);
  lua_setfield(L, -2, "capture");
}
