/*
** Calls from the event loop into Lua. Every one goes through host_pcall on
** the main state with a traceback handler: an error is reported on stderr
** and recorded (the run then exits non-zero); it never longjmps through
** uv_run and never exit()s (luv's default does, STYLE.md anti-pattern).
*/
#include "host.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

smol_host smolwf_host;


/* The interrupt error's identity: a unique address as a registry key. */
static const char interrupt_mt_key = 'i';

static int interrupt_tostring(lua_State *L) {
  lua_pushliteral(L, "interrupted");
  return 1;
}

/* stack: +1 (a fresh {code="interrupted", message="interrupted"}) */
void host_push_interrupt_error(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "interrupted");
  lua_setfield(L, -2, "code");
  lua_pushliteral(L, "interrupted");
  lua_setfield(L, -2, "message");
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &interrupt_mt_key) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, interrupt_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &interrupt_mt_key);
  }
  lua_setmetatable(L, -2);
}

int host_is_interrupt_error(lua_State *L, int idx) {
  if (!lua_istable(L, idx)) return 0;
  lua_getfield(L, idx, "code");
  const char *code = lua_tostring(L, -1);
  int yes = code != NULL && strcmp(code, "interrupted") == 0;
  lua_pop(L, 1);
  return yes;
}

/*
** Message handler (as lua.c's): adds a traceback to string errors and to
** values with __tostring. Structured errors (tables) are left as they are
** so that callers can still read their fields; host_report formats them.
*/
int host_msghandler(lua_State *L) {
  if (host_is_interrupt_error(L, 1)) return 1;
  if (lua_type(L, 1) == LUA_TSTRING) {
    host_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
  }
  if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) {
    host_traceback(L, L, lua_tostring(L, -1), 1);
    return 1;
  }
  const char *msg = lua_pushfstring(L, "(error object is a %s value)",
                                    luaL_typename(L, 1));
  host_traceback(L, L, msg, 1);
  return 1;
}

/* Prints "smolwf: WHAT: error" (or "smolwf: interrupted") and records a failure. */
void host_report(const char *what, lua_State *L, int idx) {
  smol_host *h = host_get();
  if (host_is_interrupt_error(L, idx)) {
    fprintf(stderr, "%s: interrupted\n", h->progname);
  } else {
    const char *msg = luaL_tolstring(L, idx, NULL);
    if (what != NULL) fprintf(stderr, "%s: %s: %s\n", h->progname, what, msg);
    else fprintf(stderr, "%s: %s\n", h->progname, msg);
    lua_pop(L, 1);
    h->failed = 1;
  }
  fflush(stderr);
}

/*
** Calls the function below the nargs arguments on the main state's top,
** discarding results. Returns the lua_pcall status.
*/
int host_pcall(int nargs) {
  lua_State *L = host_get()->L;
  int base = lua_gettop(L) - nargs;  /* the function's index */
  lua_pushcfunction(L, host_msghandler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, 0, base);
  if (status != LUA_OK) {
    /* an interrupt is not the callback's fault: the run reports it once */
    if (!host_is_interrupt_error(L, -1)) host_report("error in callback", L, -1);
    lua_pop(L, 1);
  }
  lua_remove(L, base);
  return status;
}

void host_unref(int *ref) {
  if (*ref != LUA_NOREF && *ref != LUA_REFNIL)
    luaL_unref(host_get()->L, LUA_REGISTRYINDEX, *ref);
  *ref = LUA_NOREF;
}
