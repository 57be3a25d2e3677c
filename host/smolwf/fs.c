/*
** Where this host lives (uv_exepath) and small file helpers for Lua:
** core.exe_path, core.bundled_provider, core.mkdtemp.
*/
#include "host.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>


int fs_init_exe_path(void) {
  size_t size = sizeof host_get()->exe_path;
  int rc = uv_exepath(host_get()->exe_path, &size);
  if (rc != 0) return rc;
  memcpy(host_get()->exe_dir, host_get()->exe_path, size + 1);
  char *slash = strrchr(host_get()->exe_dir, '/');
  if (slash == NULL) return UV_EINVAL;
  *(slash == host_get()->exe_dir ? slash + 1 : slash) = '\0';
  return 0;
}

const char *fs_exe_path(void) { return host_get()->exe_path; }
const char *fs_exe_dir(void) { return host_get()->exe_dir; }

int fs_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int core_exe_path(lua_State *L) {
  lua_pushstring(L, host_get()->exe_path);
  return 1;
}

/* core.bundled_provider() -> path of smolwf-provider next to us, or nil */
static int core_bundled_provider(lua_State *L) {
  const char *path = lua_pushfstring(L, "%s/smolwf-provider", host_get()->exe_dir);
  if (access(path, X_OK) != 0) luaL_pushfail(L);
  return 1;
}

/* core.mkdtemp(template) -> path | nil, "TEMPLATE: message", "EEXIST" */
static int core_mkdtemp(lua_State *L) {
  size_t n;
  const char *tmpl = luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n >= 6 && strcmp(tmpl + n - 6, "XXXXXX") == 0, 1,
                "template must end in XXXXXX");
  luaL_Buffer b;
  char *path = luaL_buffinitsize(L, &b, n + 1);
  memcpy(path, tmpl, n + 1);
  if (mkdtemp(path) == NULL) {
    int e = errno;
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", tmpl, strerror(e));
    lua_pushstring(L, uv_err_name(uv_translate_sys_error(e)));
    return 3;
  }
  luaL_pushresultsize(&b, n);
  return 1;
}

void fs_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"exe_path", core_exe_path}, {"bundled_provider", core_bundled_provider},
    {"mkdtemp", core_mkdtemp}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
