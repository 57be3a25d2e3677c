/*
** The smol.core module: mechanism only (loop, timers, processes, base64,
** a few fs helpers); each concept in its own file adds its functions here.
** Registered in package.preload by main.c.
*/
#include "host.h"

#include <lauxlib.h>

#include "conn.h"

int luaopen_smol_core(lua_State *L) {
  lua_newtable(L);
  loop_open(L);
  timer_open(L);
  process_open(L);
  b64_open(L);
  capture_open(L);
  conn_open(L);
  command_open(L);
  fs_open(L);
  os_open(L);
  stdio_open(L);
  tty_open(L);
  sigint_open(L);
  hash_open(L);
  introspect_open(L);
  json_check_open(L);
  traceback_open(L);
  clean_text_open(L);
  lua_pushliteral(L, SMOLWF_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
