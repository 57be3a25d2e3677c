/*
** What the host still holds, for test harnesses: core.handles() (the
** loop's handles by type) and core.registry_refs() (the live luaL_ref
** references of the main state). The spec suite compares them before and
** after every spec file, as luv's tests walk the loop after each test, so
** a file that leaves a timer, a pipe or an anchored callback behind fails.
*/
#include "host.h"

#include <lauxlib.h>

static void count_handle(uv_handle_t *handle, void *counts) {
  uv_handle_type type = uv_handle_get_type(handle);
  if (type > UV_UNKNOWN_HANDLE && type < UV_HANDLE_TYPE_MAX) ((lua_Integer *)counts)[type]++;
}

/*
** core.handles() -> {TYPE = n, ...}: every handle the loop knows, by libuv
** type name ("timer", "pipe", "process", "signal"...), including unref'd
** ones and ones whose close callback has not run yet. Counted first, then
** pushed: nothing may raise inside uv_walk, which relinks the loop's list.
*/
static int core_handles(lua_State *L) {
  lua_Integer counts[UV_HANDLE_TYPE_MAX] = {0};
  uv_walk(&host_get()->loop, count_handle, counts);
  lua_newtable(L);
  for (int type = UV_UNKNOWN_HANDLE + 1; type < UV_HANDLE_TYPE_MAX; type++) {
    if (counts[type] == 0) continue;
    lua_pushinteger(L, counts[type]);
    lua_setfield(L, -2, uv_handle_type_name((uv_handle_type)type));
  }
  return 1;
}

/*
** Where luaL_ref keeps its free list in the registry: since Lua 5.4.3 at
** index LUA_RIDX_LAST + 1, the references after it; before, at index 0.
** A free slot holds the index of the next free one (0 ends the list).
*/
#if LUA_VERSION_RELEASE_NUM >= 50403
#define REF_FREELIST (LUA_RIDX_LAST + 1)
#define REF_FIRST (LUA_RIDX_LAST + 2)
#else
#define REF_FREELIST 0
#define REF_FIRST (LUA_RIDX_LAST + 1)
#endif

/* Pushes a set of the free slots of the registry's reference list. */
static void push_free_slots(lua_State *L) {
  lua_newtable(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, REF_FREELIST);
  lua_Integer slot = lua_tointeger(L, -1);
  lua_pop(L, 1);
  while (slot > 0) {
    if (lua_rawgeti(L, -1, slot) != LUA_TNIL) {   /* a cycle: not a free list we know */
      lua_pop(L, 1);
      break;
    }
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
    lua_rawseti(L, -2, slot);
    lua_rawgeti(L, LUA_REGISTRYINDEX, slot);
    slot = lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
}

/*
** core.registry_refs() -> {[ref] = value, ...}: every live reference made
** with luaL_ref on the registry (callbacks, anchored strings, tasks), with
** the value it anchors, so a harness can say what a leaked one is.
*/
static int core_registry_refs(lua_State *L) {
  push_free_slots(L);
  lua_newtable(L);
  lua_Unsigned n = lua_rawlen(L, LUA_REGISTRYINDEX);
  for (lua_Unsigned i = REF_FIRST; i <= n; i++) {
    if (lua_rawgeti(L, -2, (lua_Integer)i) != LUA_TNIL) {   /* free */
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    if (lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)i) == LUA_TNIL) {
      lua_pop(L, 1);
      continue;
    }
    lua_rawseti(L, -2, (lua_Integer)i);
  }
  return 1;
}

void introspect_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"handles", core_handles}, {"registry_refs", core_registry_refs}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
