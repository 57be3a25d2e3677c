/*
** Checking core.spawn's options table. Misuse raises with a message naming
** the field; nothing here allocates with malloc, so a raise leaks nothing:
** argv/env arrays are userdata and their strings stay anchored on the
** stack (pushed by spawn_opts_check) until uv_spawn has copied them.
*/
#include "host.h"

#include <string.h>

#include <lauxlib.h>

#define DEFAULT_MAX_LINE ((size_t)256 * 1024 * 1024)

static int field_type(lua_State *L, int idx, const char *name) {
  return lua_getfield(L, idx, name);  /* pushes the value */
}

static const char *opt_string(lua_State *L, int idx, const char *name, int required) {
  int t = field_type(L, idx, name);
  const char *s = NULL;
  if (t == LUA_TSTRING) s = lua_tostring(L, -1);  /* anchored by the options table */
  else if (t != LUA_TNIL || required)
    luaL_error(L, "spawn: option '%s' must be a string (got %s)", name, luaL_typename(L, -1));
  lua_pop(L, 1);
  return s;
}

static int opt_bool(lua_State *L, int idx, const char *name) {
  int t = field_type(L, idx, name);
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    luaL_error(L, "spawn: option '%s' must be a boolean (got %s)", name, luaL_typename(L, -1));
  int b = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return b;
}

static int opt_stream(lua_State *L, int idx, const char *name) {
  static const char *const modes[] = {"ignore", "inherit", "lines", "chunks", NULL};
  const char *s = opt_string(L, idx, name, 0);
  if (s == NULL) return STREAM_IGNORE;
  for (int i = 0; modes[i] != NULL; i++)
    if (strcmp(modes[i], s) == 0) return i;
  return luaL_error(L, "spawn: option '%s' must be \"lines\", \"chunks\", "
                    "\"inherit\" or \"ignore\" (got \"%s\")", name, s);
}

static size_t opt_max_line(lua_State *L, int idx) {
  if (field_type(L, idx, "max_line") == LUA_TNIL) {
    lua_pop(L, 1);
    return DEFAULT_MAX_LINE;
  }
  int isint = 0;
  lua_Integer n = lua_tointegerx(L, -1, &isint);
  if (!isint || n < 1)
    luaL_error(L, "spawn: option 'max_line' must be a positive integer");
  lua_pop(L, 1);
  return (size_t)n;
}

/* stack: +1 (the argv array userdata) */
static char **opt_args(lua_State *L, int idx, const char *file) {
  int t = field_type(L, idx, "args");
  if (t != LUA_TNIL && t != LUA_TTABLE)
    luaL_error(L, "spawn: option 'args' must be a table of strings");
  lua_Integer n = t == LUA_TNIL ? 0 : luaL_len(L, -1);
  char **argv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n + 2), 0);
  argv[0] = (char *)file;  /* args absent or empty: argv = {file} */
  argv[n > 0 ? n : 1] = NULL;
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_geti(L, -2, i) != LUA_TSTRING)
      luaL_error(L, "spawn: args[%d] must be a string (got %s)", (int)i, luaL_typename(L, -1));
    argv[i - 1] = (char *)lua_tostring(L, -1);  /* anchored by the args table */
    lua_pop(L, 1);
  }
  lua_remove(L, -2);  /* the args table stays anchored by the options table */
  return argv;
}

static int count_pairs(lua_State *L, int idx) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    n++;
  }
  return n;
}

/* Pushes "K=V" for the pair on the stack top (key at -2, value at -1). */
static void push_env_entry(lua_State *L) {
  if (lua_type(L, -2) != LUA_TSTRING)
    luaL_error(L, "spawn: env keys must be strings (got %s)", luaL_typename(L, -2));
  const char *k = lua_tostring(L, -2);
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "spawn: env value for '%s' must be a string (got %s)", k, luaL_typename(L, -1));
  if (*k == '\0' || strchr(k, '=') != NULL)
    luaL_error(L, "spawn: invalid env name '%s'", k);
  lua_pushfstring(L, "%s=%s", k, lua_tostring(L, -1));
}

/*
** stack: +2 (a table anchoring the "K=V" strings, the envp userdata), or
** +0 and NULL when env is absent (the child inherits ours).
*/
static char **opt_env(lua_State *L, int idx) {
  int t = field_type(L, idx, "env");
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  if (t != LUA_TTABLE) luaL_error(L, "spawn: option 'env' must be a table {NAME = value}");
  int env = lua_gettop(L), n = count_pairs(L, env);
  lua_createtable(L, n, 0);  /* anchors the strings */
  char **envp = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n + 1), 0);
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, env)) {
    push_env_entry(L);
    envp[i] = (char *)lua_tostring(L, -1);
    lua_rawseti(L, env + 1, ++i);  /* stack: env, strings, envp, key, value */
    lua_pop(L, 1);
  }
  envp[i] = NULL;
  lua_remove(L, env);
  return envp;
}

/* 1 when the option is a function, 0 when absent; raises otherwise. */
static int opt_callback(lua_State *L, int idx, const char *name) {
  int t = field_type(L, idx, name);
  lua_pop(L, 1);
  if (t != LUA_TNIL && t != LUA_TFUNCTION)
    luaL_error(L, "spawn: option '%s' must be a function", name);
  return t == LUA_TFUNCTION;
}

static void check_callbacks(lua_State *L, int idx, const spawn_opts *o) {
  if (opt_callback(L, idx, "on_stdout") && o->out_mode < STREAM_LINES)
    luaL_error(L, "spawn: option 'on_stdout' needs stdout = \"lines\" or \"chunks\"");
  if (opt_callback(L, idx, "on_stderr") && o->err_mode < STREAM_LINES)
    luaL_error(L, "spawn: option 'on_stderr' needs stderr = \"lines\" or \"chunks\"");
  opt_callback(L, idx, "on_exit");
}

void spawn_opts_check(lua_State *L, int idx, spawn_opts *o) {
  luaL_checktype(L, idx, LUA_TTABLE);
  idx = lua_absindex(L, idx);
  o->file = opt_string(L, idx, "file", 1);
  o->cwd = opt_string(L, idx, "cwd", 0);
  o->stdin_pipe = opt_bool(L, idx, "stdin");
  o->out_mode = opt_stream(L, idx, "stdout");
  o->err_mode = opt_stream(L, idx, "stderr");
  o->process_group = opt_bool(L, idx, "process_group");
  o->max_line = opt_max_line(L, idx);
  o->drain = -1;
  if (field_type(L, idx, "drain_after_exit") != LUA_TNIL) {
    lua_getfield(L, idx, "drain_after_exit");
    o->drain = luaL_checknumber(L, -1);
    lua_pop(L, 1);
    if (!(o->drain >= 0)) luaL_error(L, "spawn: option 'drain_after_exit' must be a non-negative number");
  }
  o->args = opt_args(L, idx, o->file);
  o->env = opt_env(L, idx);
  check_callbacks(L, idx, o);
}
