/*
** Ctrl-C (and SIGTERM, SIGHUP). A C signal cannot touch a Lua state or
** the loop directly (lua.c), so the handler only sets a flag, arms a Lua
** hook (to stop a pure-Lua loop on the main state, and on the task
** running now: see host_get()->running_task) and wakes the loop through a uv_async (async-signal-
** safe by libuv's documentation). core.run_once then raises the interrupt
** error; the exit path disarms both before it runs the exit hooks.
**
** Not a uv_signal: its handler runs only when the loop runs, so it could
** not stop a script that spins in Lua without ever waiting.
*/
#include "host.h"

#include <string.h>

#include <lauxlib.h>

/*
** While core.catch_interrupt runs (see there), a signal only sets the flag
** and wakes the loop (host->catching): the interrupt error is raised where
** the loop is run, never halfway through Lua code of the scheduler. A
** second signal before the first was caught (a task spinning in Lua never
** lets the loop run) arms the hooks as usual (host->forced).
*/
static int hooks_wanted(const smol_host *h) {
  return h->hook_allowed && (!h->catching || h->forced);
}

/*
** The task coroutine running now (core.resume sets it), NULL between
** resumes. The handler can reach only the main state and this one: it
** hooks both, so Ctrl-C also stops a task spinning in Lua. A standing
** count hook on every task would do it too, but any hook makes the Lua VM
** trace every instruction (about a fifth of a request's cost).
*/

static void interrupt_hook(lua_State *L, lua_Debug *ar);

/* Hooks L to raise the interrupt error at its next instruction. */
static void arm_interrupt(lua_State *L) {
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/*
** Raises the interrupt error and stays armed on every line (and every
** backward jump): like Redis's killed-script hook, so a pcall in a loop
** cannot swallow it and carry on.
*/
static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  if (!host_get()->interrupted) {  /* the exit path took over: stop raising */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  lua_sethook(L, interrupt_hook, LUA_MASKLINE, 0);
  host_push_interrupt_error(L);
  lua_error(L);
}

static void on_sigint(int signo) {
  smol_host *h = host_get();
  if (h->catching && h->interrupted) h->forced = 1;
  h->interrupted = 1;
  h->was_interrupted = signo;
  if (hooks_wanted(h)) {
    arm_interrupt(h->L);
    lua_State *task = host_get()->running_task;
    if (task != NULL) arm_interrupt(task);
  }
  if (host_get()->wake_allowed) uv_async_send(&host_get()->wake_loop);
}

/* Nothing to do: waking uv_run is the point; run_once checks the flag. */
static void on_wake(uv_async_t *handle) { (void)handle; }

int sigint_install(smol_host *h) {
  int rc = uv_async_init(&h->loop, &host_get()->wake_loop, on_wake);
  if (rc != 0) return rc;
  uv_unref((uv_handle_t *)&host_get()->wake_loop);  /* must not keep run_once "alive" */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  host_get()->hook_allowed = host_get()->wake_allowed = 1;
  /* TERM and HUP (a CI timeout, a closed terminal) end the run the same clean way */
  int ok = sigaction(SIGINT, &sa, NULL) == 0 && sigaction(SIGTERM, &sa, NULL) == 0 &&
           sigaction(SIGHUP, &sa, NULL) == 0;
  return ok ? 0 : UV_EINVAL;
}

/* The exit path took over: exit hooks may run the loop again. */
void sigint_disarm(smol_host *h) {
  h->interrupted = 0;
  lua_sethook(h->L, NULL, 0, 0);
}

/*
** After the exit hooks no Lua code must be interrupted (lua_close runs
** finalizers) and the loop is about to close; the handler stays installed
** (the default action would skip killing the run's processes) but from now
** on only sets the flag.
*/
void sigint_close(smol_host *h) {
  if (!host_get()->wake_allowed) return;
  host_get()->hook_allowed = host_get()->wake_allowed = 0;
  sigint_disarm(h);
  uv_close((uv_handle_t *)&host_get()->wake_loop, NULL);
}

/* Moves co's results (after true), or its error (after false), onto L. */
static int resume_results(lua_State *L, lua_State *co, int status, int nres) {
  if (status != LUA_OK && status != LUA_YIELD) {
    lua_pushboolean(L, 0);
    lua_xmove(co, L, 1);
    return 2;
  }
  luaL_checkstack(L, nres + 1, "too many results to resume");
  lua_pushboolean(L, 1);
  lua_xmove(co, L, nres);
  return nres + 1;
}

/*
** core.resume(co, ...): coroutine.resume for smol.task's scheduler, with
** co watched for Ctrl-C while it runs (see host_get()->running_task). The scheduler
** resumes only suspended tasks, from outside any task; nesting is still
** kept right (the outer task is watched again after). Like Lua's own, a
** task that cannot be resumed yields false and a message.
*/
static int core_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co != NULL, 1, "coroutine");
  luaL_argcheck(L, co != L, 1, "cannot resume the running coroutine");
  int narg = lua_gettop(L) - 1;
  /* lua_resume itself refuses a dead or non-suspended coroutine */
  luaL_checkstack(co, narg, "too many arguments to resume");
  lua_xmove(L, co, narg);
  lua_State *outer = host_get()->running_task;
  host_get()->running_task = co;
  if (host_get()->interrupted && hooks_wanted(host_get())) arm_interrupt(co);
  int nres = 0;
  int status = lua_resume(co, L, narg, &nres);
  host_get()->running_task = outer;
  return resume_results(L, co, status, nres);
}

/*
** core.catch_interrupt(fn, ...) -> true, fn's results; or false and the
** signal's name ("INT", "TERM") when Ctrl-C interrupted fn: for code that
** handles the interrupt itself and carries on (the workflow runner still
** runs `always` steps), so fn is meant to wait in the loop (a queue's
** pop): the error comes from there (see hooks_wanted). It is disarmed here,
** in C, before any Lua line runs (an armed hook raises again at every
** line); the exit status stays 128+signal and the next signal interrupts
** again. Other errors pass through unchanged, and so does an interrupt
** that had to be forced (a second signal before the first was caught):
** it may have stopped Lua code anywhere, so the exit path takes over.
** Not for use inside a task (fn must not yield).
*/
static int core_catch_interrupt(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  smol_host *h = host_get();
  sig_atomic_t outer = h->catching;
  h->catching = 1;
  int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  h->catching = outer;
  if (status == LUA_OK) {
    lua_pushboolean(L, 1);
    lua_insert(L, 1);
    return lua_gettop(L);
  }
  if (!host_is_interrupt_error(L, -1) || h->forced) return lua_error(L);
  sigint_disarm(h);
  const char *name = signal_to_name(h->was_interrupted);
  lua_pushboolean(L, 0);
  lua_pushstring(L, name != NULL ? name : "INT");
  return 2;
}

void sigint_open(lua_State *L) {
  lua_pushcfunction(L, core_resume);
  lua_setfield(L, -2, "resume");
  lua_pushcfunction(L, core_catch_interrupt);
  lua_setfield(L, -2, "catch_interrupt");
}
