/*
** Terminal questions for Lua: core.isatty(fd) and core.term_width().
** The live progress view needs both; asking the kernel here saves it
** forking test(1) and stty(1).
*/
#include "host.h"

#include <limits.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <lauxlib.h>

/* core.isatty(fd) -> boolean: whether fd (0, 1, 2, ...) is a terminal. */
static int core_isatty(lua_State *L) {
  lua_Integer fd = luaL_checkinteger(L, 1);
  luaL_argcheck(L, fd >= 0 && fd <= INT_MAX, 1, "fd must be a non-negative integer");
  lua_pushboolean(L, isatty((int)fd) == 1);
  return 1;
}

/*
** core.term_width() -> columns of the terminal on our stdout, or nil when
** stdout is not a terminal (or the terminal reports no size, as a fresh
** pty does until someone sets one). ioctl rather than uv_tty_get_winsize:
** the latter needs a uv_tty_t handle, which would take over fd 1's mode.
*/
static int core_term_width(lua_State *L) {
  struct winsize ws;
  if (ioctl(1, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) luaL_pushfail(L);
  else lua_pushinteger(L, ws.ws_col);
  return 1;
}

void tty_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"isatty", core_isatty}, {"term_width", core_term_width}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
