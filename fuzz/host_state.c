/*
** The host of the host-side harnesses (see host_state.h).
*/
#include "host_state.h"

#include <signal.h>

#include <lauxlib.h>
#include <lualib.h>

#include "check.h"
#include "host.h"

int luaopen_smol_core(lua_State *L);

lua_State *fuzz_host_state(const char *chunk) {
  smol_host *h = host_get();
  h->progname = "smolwf";
  signal(SIGPIPE, SIG_IGN);
  lua_State *L;
  if (uv_loop_init(&h->loop) != 0 || !(L = h->L = luaL_newstate())) fuzz_fail("cannot set up the host");
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_smol_core);
  lua_setfield(L, -2, "smol.core");
  lua_pop(L, 1);
  lua_getglobal(L, "package");
  lua_pushstring(L, FUZZ_LUA_DIR "/?.lua;" FUZZ_LUA_DIR "/?/init.lua");
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  if (luaL_loadstring(L, chunk) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
    fuzz_fail("the harness's Lua: %s", lua_tostring(L, -1));
  return L;
}
