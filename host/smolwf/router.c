/*
** Routing a provider's reply lines to their requests' queues without a
** call into Lua per line: the hot path of every request of smol.jsonl.
**
**   proc:route_replies(pending, notify, max_depth, max_line)  -- on
**   proc:route_replies(nil)                                   -- off
**
** While on, each line of the process's stdout shorter than max_line is
** decoded here (message.c). A message whose id is a key of `pending`, and
** whose kind is result, error or event, is appended to that request's
** reply queue rq = pending[id] as the pair (kind, body) at rq.tail + 1 and
** + 2; a terminal one (result, error) also removes pending[id]; then, if
** rq.waiters is set, notify(rq) is called. Every other line (long ones,
** faults, ids nobody waits for) goes to the stdout callback as before, so
** smol.jsonl keeps every decision that is not this common case; it turns
** routing off while an observer wants to see every line, and once the
** connection is broken. The queue layout is smol.jsonl's (see its push).
*/
#include "host.h"

#include <string.h>

#include <lauxlib.h>

/* Pushes the reply queue of the id at index id_idx, or returns 0 (nothing pushed). */
static int push_queue(lua_State *L, const reply_router *rt, int id_idx) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->pending_ref);
  lua_pushvalue(L, id_idx);
  if (lua_rawget(L, -2) != LUA_TTABLE) return 0;
  return 1;
}

/* Appends kind and body (at kind_idx, kind_idx + 1) to the queue on the stack top. */
static void append(lua_State *L, int kind_idx) {
  lua_getfield(L, -1, "tail");
  lua_Integer tail = lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_pushvalue(L, kind_idx);
  lua_rawseti(L, -2, tail + 1);
  lua_pushvalue(L, kind_idx + 1);
  lua_rawseti(L, -2, tail + 2);
  lua_pushinteger(L, tail + 2);
  lua_setfield(L, -2, "tail");
}

int router_take(const reply_router *rt, lua_State *L, const char *line, size_t len) {
  if (len >= rt->max_line) return 0;
  int top = lua_gettop(L);
  int handled = 0;
  if (message_push(L, line, len, rt->max_depth) == 3 && lua_type(L, top + 2) == LUA_TSTRING &&
      push_queue(L, rt, top + 1)) {
    int pending = top + 4;
    if (strcmp(lua_tostring(L, top + 2), "event") != 0) {  /* a result or an error: the request ends */
      lua_pushvalue(L, top + 1);
      lua_pushnil(L);
      lua_rawset(L, pending);
    }
    append(L, top + 2);
    if (lua_getfield(L, -1, "waiters") != LUA_TNIL) {
      lua_rawgeti(L, LUA_REGISTRYINDEX, rt->notify_ref);
      lua_pushvalue(L, -3);
      host_pcall(1);
    }
    handled = 1;
  }
  lua_settop(L, top);
  return handled;
}

void router_off(reply_router *rt) {
  host_unref(&rt->pending_ref);
  host_unref(&rt->notify_ref);
  rt->on = 0;
}

/* stack: pending table at idx, notify at idx + 1, max_depth, max_line */
void router_on(lua_State *L, reply_router *rt, int idx) {
  luaL_checktype(L, idx, LUA_TTABLE);
  luaL_checktype(L, idx + 1, LUA_TFUNCTION);
  int max_depth = (int)luaL_checkinteger(L, idx + 2);
  lua_Integer max_line = luaL_checkinteger(L, idx + 3);
  router_off(rt);
  lua_pushvalue(L, idx);
  rt->pending_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, idx + 1);
  rt->notify_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  rt->max_depth = max_depth;
  rt->max_line = max_line > 0 ? (size_t)max_line : 0;
  rt->on = 1;
}
