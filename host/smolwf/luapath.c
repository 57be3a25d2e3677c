/*
** package.path, in this order: the project's lua/ (next to the binary in
** a build tree, else SMOLWF_INSTALL_LUADIR_REL relative to it once
** installed), SMOLWF_PATH dirs (colon-separated), --path dirs, ./?.lua,
** then what Lua had (LUA_PATH or its defaults: /usr/share/lua/5.4 etc.,
** where cjson, busted and lfs live).
*/
#include "host.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

static void add_dir(luaL_Buffer *b, const char *dir, size_t len) {
  if (len == 0) return;
  luaL_addlstring(b, dir, len);
  luaL_addstring(b, "/?.lua;");
  luaL_addlstring(b, dir, len);
  luaL_addstring(b, "/?/init.lua;");
}

/* lua/ next to the binary (build tree), else the installed location */
static const char *push_project_dir(lua_State *L) {
  const char *dir = lua_pushfstring(L, "%s/lua", fs_exe_dir());
  if (fs_is_dir(dir)) return dir;
  lua_pop(L, 1);
  return lua_pushfstring(L, "%s/%s", fs_exe_dir(), SMOLWF_INSTALL_LUADIR_REL);
}

static void add_colon_list(luaL_Buffer *b, const char *list) {
  while (list != NULL && *list != '\0') {
    const char *colon = strchr(list, ':');
    size_t len = colon ? (size_t)(colon - list) : strlen(list);
    add_dir(b, list, len);
    list = colon ? colon + 1 : NULL;
  }
}

void luapath_setup(lua_State *L, const char *const *extra, int nextra) {
  lua_getglobal(L, LUA_LOADLIBNAME);
  lua_getfield(L, -1, "path");
  const char *defaults = lua_tostring(L, -1);
  const char *project = push_project_dir(L);  /* stack: package, path, project */
  traceback_set_engine_dir(project);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  add_dir(&b, project, strlen(project));
  add_colon_list(&b, getenv("SMOLWF_PATH"));
  for (int i = 0; i < nextra; i++) add_dir(&b, extra[i], strlen(extra[i]));
  luaL_addstring(&b, "./?.lua;");
  luaL_addstring(&b, defaults ? defaults : "");
  luaL_pushresult(&b);
  lua_setfield(L, -4, "path");
  lua_pop(L, 3);
}
