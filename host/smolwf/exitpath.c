/*
** The one way out, on normal end, on error, on Ctrl-C and from os.exit:
** (1) after a clean main chunk, let every task finish; (2) run the Lua exit
** hooks (smol.task's at_exit: sessions closed, providers shut down, with
** the loop still usable); (3) no more Lua callbacks: TERM every process
** still running, a short grace, then KILL, and reap them all; flush our
** stdout; close every uv handle; (4) lua_close, uv_loop_close.
*/
#include "host.h"

#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lualib.h>

#define TERM_GRACE_MS 1000     /* time to exit cleanly after TERM */
#define KILL_WAIT_MS 5000      /* KILL cannot be ignored; bounds a D-state child */
#define STDOUT_FLUSH_MS 5000   /* a reader that stopped reading must not hang us */

/*
** Calls smol.task's NAME() on the main state if the module was loaded.
** smol.task keeps itself in registry["smol.task"], not only in
** package.loaded (which busted empties between spec files).
*/
static void call_task_hook(lua_State *L, const char *name) {
  lua_checkstack(L, 4);
  int is_table = lua_getfield(L, LUA_REGISTRYINDEX, "smol.task") == LUA_TTABLE;
  if (is_table) lua_getfield(L, -1, name);
  if (!is_table || !lua_isfunction(L, -1)) {
    lua_settop(L, lua_gettop(L) - (is_table ? 2 : 1));
    return;
  }
  lua_pushcfunction(L, host_msghandler);
  lua_rotate(L, -2, 1);  /* stack: task, msghandler, fn */
  if (lua_pcall(L, 0, 0, -2) != LUA_OK) {
    host_report(NULL, L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}


static void on_deadline(uv_timer_t *t) {
  (void)t;
  host_get()->deadline_passed = 1;
}

static int no_live_process(void) { return process_live_count() == 0; }
static int stdout_flushed(void) { return !stdio_out_pending(); }

/* Runs the loop (no Lua callbacks are left) until done() or ms passed. */
static void run_until(smol_host *h, int (*done)(void), uint64_t ms) {
  uv_timer_t deadline;
  host_get()->deadline_passed = 0;
  uv_timer_init(&h->loop, &deadline);
  uv_timer_start(&deadline, on_deadline, ms, 0);
  while (!done() && !host_get()->deadline_passed) uv_run(&h->loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_run(&h->loop, UV_RUN_NOWAIT);  /* completes the close: 'deadline' dies here */
}

static void close_leftover(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (!uv_is_closing(handle)) uv_close(handle, NULL);
}

/* Step (3): from here on no Lua code runs from the loop. */
static void stop_everything(smol_host *h) {
  process_detach_all();
  timer_close_all();
  stdio_stop_reading();
  if (process_live_count() > 0) {
    process_signal_all(SIGTERM);
    run_until(h, no_live_process, TERM_GRACE_MS);
  }
  if (process_live_count() > 0) {
    process_signal_all(SIGKILL);
    run_until(h, no_live_process, KILL_WAIT_MS);
  }
  run_until(h, stdout_flushed, STDOUT_FLUSH_MS);
  process_close_all();
  stdio_close_all();
  uv_run(&h->loop, UV_RUN_NOWAIT);  /* close callbacks free their structs */
  uv_walk(&h->loop, close_leftover, NULL);  /* only a child that survived KILL */
  uv_run(&h->loop, UV_RUN_NOWAIT);
}

static int final_status(smol_host *h, int status) {
  if (h->was_interrupted) return 128 + h->was_interrupted;  /* 130 after Ctrl-C */
  if (status == 0 && h->failed) return 1;
  return status;
}

/*
** Runs steps (1) to (3) once; returns the exit status. Inside a loop
** callback (os.exit there) the loop cannot run: everything still running
** gets KILL and the kernel reparents it to init for reaping.
*/
int exitpath_run(lua_State *L, int status, int drain) {
  smol_host *h = host_get();
  if (h->exiting) return final_status(h, status);
  h->exiting = 1;
  if (h->loop_running) {
    process_signal_all(SIGKILL);
    return final_status(h, status);
  }
  if (drain && !h->interrupted) call_task_hook(L, "_host_drain");
  sigint_disarm(h);
  call_task_hook(L, "_host_exit_hooks");
  sigint_close(h);
  stop_everything(h);
  return final_status(h, status);
}

/* Step (4). Skipped inside a loop callback: the process is about to exit anyway. */
void exitpath_finish(void) {
  smol_host *h = host_get();
  if (h->L == NULL || h->loop_running) return;
  lua_close(h->L);  /* finalizers only detach: every handle is closed already */
  h->L = NULL;
  uv_run(&h->loop, UV_RUN_NOWAIT);
  if (uv_loop_close(&h->loop) != 0)
    fprintf(stderr, "%s: warning: uv handles left open at exit\n", h->progname);
}

/* os.exit([code [, close]]) through the exit path, so nothing is left running. */
static int host_os_exit(lua_State *L) {
  int status;
  if (lua_isboolean(L, 1)) status = lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE;
  else status = (int)luaL_optinteger(L, 1, EXIT_SUCCESS);
  int close_state = lua_toboolean(L, 2);
  smol_host *h = host_get();
  if (h->exiting) return luaL_error(L, "os.exit called while the run is exiting");
  status = exitpath_run(h->L, status, 0);
  fflush(NULL);
  if (close_state) exitpath_finish();
  exit(status);
}

void exitpath_replace_os_exit(lua_State *L) {
  lua_getglobal(L, LUA_OSLIBNAME);
  lua_pushcfunction(L, host_os_exit);
  lua_setfield(L, -2, "exit");
  lua_pop(L, 1);
}
