/*
** The event loop as Lua sees it: core.run_once, core.run_nowait, core.now,
** core.time, core.report_error. Scheduling policy lives in smol.task; these
** only run the loop and tell the time.
*/
#include "host.h"

#include <lauxlib.h>

/*
** Runs one loop iteration. Refuses to nest (a callback cannot wait
** synchronously: the loop is already running under it) and raises the
** interrupt error once Ctrl-C was pressed, before and after waiting.
*/
static int run(lua_State *L, uv_run_mode mode) {
  smol_host *h = host_get();
  if (h->loop_running) return luaL_error(L, "loop already running");
  if (h->interrupted) goto interrupted;
  h->loop_running = 1;
  int alive = uv_run(&h->loop, mode);
  h->loop_running = 0;
  if (h->interrupted) goto interrupted;
  lua_pushboolean(L, alive);
  return 1;
interrupted:
  host_push_interrupt_error(L);
  return lua_error(L);
}

static int core_run_once(lua_State *L) { return run(L, UV_RUN_ONCE); }
static int core_run_nowait(lua_State *L) { return run(L, UV_RUN_NOWAIT); }

/* monotonic seconds (uv_hrtime), for durations */
static int core_now(lua_State *L) {
  lua_pushnumber(L, (lua_Number)uv_hrtime() / 1e9);
  return 1;
}

/* wall clock, seconds since the epoch */
static int core_time(lua_State *L) {
  uv_timeval64_t tv;
  if (uv_gettimeofday(&tv) != 0) return luaL_error(L, "gettimeofday failed");
  lua_pushnumber(L, (lua_Number)tv.tv_sec + (lua_Number)tv.tv_usec / 1e6);
  return 1;
}

/*
** core.report_error(what, err): prints "smolwf: WHAT: err" on stderr and
** makes the run exit non-zero (smol.task uses it for errors in tasks that
** nobody joined).
*/
static int core_report_error(lua_State *L) {
  const char *what = luaL_checkstring(L, 1);
  host_report(what, L, 2);
  return 0;
}

static void count_handle(uv_handle_t *handle, void *count) {
  if (uv_has_ref(handle) || uv_is_closing(handle)) ++*(int *)count;
}

/*
** core.open_handles() -> n: uv handles the loop still knows, including
** ones whose close is pending (our unref'd Ctrl-C wakeup is not counted).
** For tests: after everything is closed and one run_nowait, it is 0.
*/
static int core_open_handles(lua_State *L) {
  int count = 0;
  uv_walk(&host_get()->loop, count_handle, &count);
  lua_pushinteger(L, count);
  return 1;
}

void loop_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"run_once", core_run_once}, {"run_nowait", core_run_nowait},
    {"now", core_now}, {"time", core_time},
    {"report_error", core_report_error}, {"open_handles", core_open_handles},
    {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
