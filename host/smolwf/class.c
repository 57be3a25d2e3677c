/*
** The metatable of a userdata class of smol.core (a timer, a capture, the
** stdin reader): its metamethods, and its methods as __index.
*/
#include "host.h"

#include <lauxlib.h>

void host_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta) {
  luaL_newmetatable(L, name);
  luaL_setfuncs(L, meta, 0);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}
