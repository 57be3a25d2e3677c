/*
** core.timer(seconds, fn) -> t: a one-shot timer (metatable "smol.timer").
** A pending timer is anchored (registry ref) so it fires even when the
** script dropped t; firing or t:stop() releases it. The uv handle is freed
** in its close callback; the box only points at it (STYLE.md pattern 5).
*/
#include "host.h"

#include <math.h>
#include <stdlib.h>

#include <lauxlib.h>

#define TIMER_MT "smol.timer"

typedef struct timer timer;
typedef struct timer_box { timer *t; } timer_box;

struct timer {
  uv_timer_t handle;
  int fn_ref, self_ref;
  timer_box *box;           /* NULL once stopped or fired */
  timer *prev, *next;       /* host_get()->timers: closed by the exit path */
};


static void on_closed(uv_handle_t *handle) {
  timer *t = handle->data;
  if (t->prev) t->prev->next = t->next;
  else host_get()->timers = t->next;
  if (t->next) t->next->prev = t->prev;
  free(t);
}

/* Detaches from the box and closes; idempotent through box->t. */
static void stop(timer_box *box) {
  timer *t = box->t;
  if (t == NULL) return;
  box->t = NULL;
  t->box = NULL;
  host_unref(&t->fn_ref);
  host_unref(&t->self_ref);
  uv_close((uv_handle_t *)&t->handle, on_closed);
}

static void on_timeout(uv_timer_t *handle) {
  timer *t = handle->data;
  lua_State *L = host_get()->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->fn_ref);
  stop(t->box);  /* one-shot: the function stays on the stack for the call */
  host_pcall(0);
}

/* core.timer(seconds, fn) -> t */
static int core_timer(lua_State *L) {
  lua_Number secs = luaL_checknumber(L, 1);
  luaL_argcheck(L, secs >= 0 && isfinite(secs), 1, "expected a non-negative number of seconds");
  luaL_checktype(L, 2, LUA_TFUNCTION);
  timer_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->t = NULL;
  luaL_setmetatable(L, TIMER_MT);
  timer *t = calloc(1, sizeof *t);
  if (t == NULL) return luaL_error(L, "timer: out of memory");
  uv_timer_init(&host_get()->loop, &t->handle);  /* cannot fail on unix */
  t->handle.data = t;
  t->next = host_get()->timers;
  if (host_get()->timers) host_get()->timers->prev = t;
  host_get()->timers = t;
  lua_pushvalue(L, 2);
  t->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, -1);
  t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  box->t = t;
  t->box = box;
  /* the loop's cached "now" may be stale after a long stretch of Lua code */
  uv_update_time(&host_get()->loop);
  double ms = ceil(secs * 1000.0);
  uv_timer_start(&t->handle, on_timeout, ms > 1e15 ? (uint64_t)1e15 : (uint64_t)ms, 0);
  return 1;
}

static int timer_stop(lua_State *L) {
  stop(luaL_checkudata(L, 1, TIMER_MT));
  return 0;
}

static int timer_active(lua_State *L) {
  timer_box *box = luaL_checkudata(L, 1, TIMER_MT);
  lua_pushboolean(L, box->t != NULL);
  return 1;
}

void timer_close_all(void) {
  for (timer *t = host_get()->timers; t != NULL; t = t->next)
    if (t->box != NULL) stop(t->box);
}

static int timer_tostring(lua_State *L) {
  timer_box *box = luaL_checkudata(L, 1, TIMER_MT);
  lua_pushstring(L, box->t != NULL ? "smol.timer (active)" : "smol.timer (stopped)");
  return 1;
}

/* A stopped timer is what a closed one is: stop and active still answer. */
void timer_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"stop", timer_stop}, {"active", timer_active}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
    {"__gc", timer_stop}, {"__close", timer_stop}, {"__tostring", timer_tostring}, {NULL, NULL}};
  host_class(L, TIMER_MT, methods, meta);
  lua_pushcfunction(L, core_timer);
  lua_setfield(L, -2, "timer");
}
