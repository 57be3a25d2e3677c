/*
** core.process_params: an exec/spawn spec {argv..., options} checked and
** turned into the params of its request, in one call.
**
**   argv, params = core.process_params(spec, op, session_json, timeouts, tail)
**
** argv is a new list of the command's strings; params is the JSON text
** {"session":<session_json>,"argv":[...],"cwd":...,"env":...,
** "stdin_base64":...<timeout fields><tail>, where tail closes the object
** (smol.sandbox passes ',"max_output_bytes":0}' or '}') and the timeout
** fields (timeout_ms, idle_timeout_ms) are there only when `timeouts` is
** true (the session announces "timeout") and the spec has them. A bad
** spec raises an error naming op and what was wrong, at the caller of
** the Lua function that called this (sb:exec's caller).
**
** Why C: this is the first half of every command's hot path, and in Lua
** its checks, copies and per-value encodes (type() calls, next() steps,
** lua-cjson calls) cost about 7.5k instructions for {"true"}; here about
** 4.3k (callgrind, both counted in a loop of calls). Values are encoded
** by cJSON (its memory from json_arena.h); only the base64 of stdin, which
** needs no escaping and can be big, is spliced in as it is.
*/
#include "host.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

#include "base64.h"

/* The stack slots of process_params: its arguments, then what it reads from the spec. */
enum { SPEC = 1, OP, SESSION, TIMEOUTS, TAIL, ARGV, CWD, ENV, STDIN, TIMEOUT, IDLE_TIMEOUT };

/* slot: where the option's value goes for the params (0: it is not sent) */
typedef struct option { const char *name; int type, slot; } option;

/* LUA_TNUMBER + 100: a non-negative integer */
#define NON_NEGATIVE_INTEGER (LUA_TNUMBER + 100)

static const option OPTIONS[] = {
  {"cwd", LUA_TSTRING, CWD}, {"stdin", LUA_TSTRING, STDIN}, {"timeout", LUA_TNUMBER, TIMEOUT},
  {"idle_timeout", LUA_TNUMBER, IDLE_TIMEOUT}, {"max_output_bytes", NON_NEGATIVE_INTEGER, 0},
  {"capture", LUA_TBOOLEAN, 0}, {"env", LUA_TTABLE, ENV}, {"on_stdout", LUA_TFUNCTION, 0},
  {"on_stderr", LUA_TFUNCTION, 0}, {"on_event", LUA_TFUNCTION, 0},
};

/* Raises "sandbox: OP: message" at sb:exec's caller (level 2 from here). */
static int spec_error(lua_State *L, const char *op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  luaL_where(L, 2);
  lua_pushfstring(L, "sandbox: %s: ", op);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 3);
  return lua_error(L);
}

static const option *find_option(const char *name) {
  for (size_t i = 0; i < sizeof OPTIONS / sizeof OPTIONS[0]; i++)
    if (strcmp(OPTIONS[i].name, name) == 0) return &OPTIONS[i];
  return NULL;
}

/* A string value that the OS could take: no NUL byte inside. */
static void check_no_nul(lua_State *L, const char *op, int idx, const char *what) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (memchr(s, '\0', len) != NULL) spec_error(L, op, "%s contains a NUL byte", what);
}

static void check_env(lua_State *L, const char *op, int env) {
  lua_pushnil(L);
  while (lua_next(L, env) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      spec_error(L, op, "env must map strings to strings (bad entry %s)", luaL_tolstring(L, -2, NULL));
    check_no_nul(L, op, -2, "an env name");
    check_no_nul(L, op, -1, "an env value");
    lua_pop(L, 1);
  }
}

/* The option at key -2, value -1 of the spec's traversal: known and of its type. */
static void check_option(lua_State *L, const char *op) {
  if (lua_type(L, -2) != LUA_TSTRING)
    spec_error(L, op, "argv must be a list of strings (found key %s after its end)", luaL_tolstring(L, -2, NULL));
  const char *name = lua_tostring(L, -2);
  const option *o = find_option(name);
  if (o == NULL) spec_error(L, op, "unknown option \"%s\"", name);
  if (o->type == NON_NEGATIVE_INTEGER) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
      spec_error(L, op, "option %s must be a non-negative integer, got %s", name, luaL_tolstring(L, -1, NULL));
  } else if (lua_type(L, -1) != o->type) {
    spec_error(L, op, "option %s must be a %s, got %s", name, lua_typename(L, o->type), luaL_typename(L, -1));
  }
  if (o->type == LUA_TTABLE) check_env(L, op, lua_gettop(L));
  if (o->type == LUA_TSTRING && strcmp(name, "stdin") != 0) check_no_nul(L, op, -1, name);
  if (o->slot) lua_copy(L, -1, o->slot);
}

/*
** Pushes the argv list of spec (at 1) at ARGV and checks every other key
** is a good option; the options sent go to their slots (nil when absent).
*/
static lua_Integer push_argv(lua_State *L, const char *op) {
  if (lua_type(L, 1) != LUA_TTABLE) spec_error(L, op, "expected a table {argv..., options}");
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
  if (n == 0) spec_error(L, op, "argv is empty");
  lua_createtable(L, (int)n, 0);
  int argv = lua_gettop(L);
  lua_settop(L, IDLE_TIMEOUT);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, 1, i) != LUA_TSTRING) spec_error(L, op, "argv[%d] must be a string", (int)i);
    check_no_nul(L, op, -1, "an argv string");
    lua_rawseti(L, argv, i);
  }
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {
    int is_argv = lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= n;
    if (!is_argv) check_option(L, op);
    lua_pop(L, 1);
  }
  return n;
}

/*
** The params are written into one host_get()->params buffer, kept between calls, and
** become one Lua string at the end: appending piece by piece to a
** luaL_Buffer cost more than the rest (measured). cJSON prints each value
** straight into it (cJSON_PrintPreallocated), given room for the worst
** case: every byte escaped as \u00XX.
*/

static void reserve(lua_State *L, size_t more) {
  if (host_get()->params.cap - host_get()->params.len >= more) return;
  size_t cap = host_get()->params.cap ? host_get()->params.cap : 4096;
  while (cap - host_get()->params.len < more) cap *= 2;
  char *p = realloc(host_get()->params.buf, cap);
  if (p == NULL) luaL_error(L, "process_params: out of memory");
  host_get()->params.buf = p;
  host_get()->params.cap = cap;
}

static void add(lua_State *L, const char *s, size_t n) {
  reserve(L, n);
  memcpy(host_get()->params.buf + host_get()->params.len, s, n);
  host_get()->params.len += n;
}

#define ADD_LITERAL(L, s) add(L, s, sizeof(s) - 1)

/* Prints item into the host_get()->params buffer (bound: an upper bound of its text) and frees it. */
static void add_json(lua_State *L, cJSON *item, size_t bound) {
  bound += 16;  /* cJSON asks for a few bytes more than it writes */
  if (item != NULL) reserve(L, bound);
  int ok = item != NULL && cJSON_PrintPreallocated(item, host_get()->params.buf + host_get()->params.len, (int)bound, 0);
  cJSON_Delete(item);
  if (!ok) luaL_error(L, "process_params: out of memory");
  host_get()->params.len += strlen(host_get()->params.buf + host_get()->params.len);
}

/* An upper bound of a string's JSON text: every byte as \u00XX, and quotes. */
static size_t string_bound(size_t n) { return 6 * n + 2; }

static cJSON *argv_json(lua_State *L, lua_Integer n, size_t *bound) {
  cJSON *list = cJSON_CreateArray();
  *bound = 2;
  for (lua_Integer i = 1; list != NULL && i <= n; i++) {
    size_t len;
    lua_rawgeti(L, ARGV, i);
    cJSON_AddItemToArray(list, cJSON_CreateString(lua_tolstring(L, -1, &len)));
    *bound += string_bound(len) + 1;
    lua_pop(L, 1);
  }
  return list;
}

static cJSON *env_json(lua_State *L, size_t *bound) {
  cJSON *object = cJSON_CreateObject();
  *bound = 2;
  lua_pushnil(L);
  while (object != NULL && lua_next(L, ENV) != 0) {
    size_t name_len, value_len;
    const char *name = lua_tolstring(L, -2, &name_len), *value = lua_tolstring(L, -1, &value_len);
    cJSON_AddStringToObject(object, name, value);
    *bound += string_bound(name_len) + string_bound(value_len) + 2;
    lua_pop(L, 1);
  }
  return object;
}

static void add_cwd(lua_State *L) {
  size_t n;
  const char *cwd = lua_tolstring(L, CWD, &n);
  if (cwd == NULL) ADD_LITERAL(L, "null");
  else add_json(L, cJSON_CreateString(cwd), string_bound(n));
}

static void add_env(lua_State *L) {
  size_t bound;
  if (lua_type(L, ENV) != LUA_TTABLE) ADD_LITERAL(L, "null");
  else {
    cJSON *env = env_json(L, &bound);
    add_json(L, env, bound);
  }
}

static void add_stdin(lua_State *L) {
  size_t n;
  const unsigned char *bytes = (const unsigned char *)lua_tolstring(L, STDIN, &n);
  if (bytes == NULL) {
    ADD_LITERAL(L, "null");
    return;
  }
  reserve(L, b64_encoded_len(n) + 2);
  host_get()->params.buf[host_get()->params.len++] = '"';
  host_get()->params.len += b64_encode(bytes, n, host_get()->params.buf + host_get()->params.len);
  host_get()->params.buf[host_get()->params.len++] = '"';
}

/* name<milliseconds> for a spec field in seconds, when it is there. */
static void add_milliseconds(lua_State *L, int idx, const char *name) {
  if (lua_type(L, idx) != LUA_TNUMBER) return;
  add(L, name, strlen(name));
  add_json(L, cJSON_CreateNumber(floor(lua_tonumber(L, idx) * 1000 + 0.5)), 32);
}

static int core_process_params(lua_State *L) {
  const char *op = luaL_checkstring(L, OP);
  size_t session_len, tail_len;
  const char *session = luaL_checklstring(L, SESSION, &session_len);
  int timeouts = lua_toboolean(L, TIMEOUTS);
  const char *tail = luaL_checklstring(L, TAIL, &tail_len);
  lua_settop(L, TAIL);
  lua_Integer n = push_argv(L, op);
  json_arena_reset(&host_get()->json_arena);
  host_get()->params.len = 0;
  ADD_LITERAL(L, "{\"session\":");
  add(L, session, session_len);
  ADD_LITERAL(L, ",\"argv\":");
  size_t bound;
  cJSON *argv = argv_json(L, n, &bound);
  add_json(L, argv, bound);
  ADD_LITERAL(L, ",\"cwd\":");
  add_cwd(L);
  ADD_LITERAL(L, ",\"env\":");
  add_env(L);
  ADD_LITERAL(L, ",\"stdin_base64\":");
  add_stdin(L);
  if (timeouts) {
    add_milliseconds(L, TIMEOUT, ",\"timeout_ms\":");
    add_milliseconds(L, IDLE_TIMEOUT, ",\"idle_timeout_ms\":");
  }
  add(L, tail, tail_len);
  lua_pushvalue(L, ARGV);
  lua_pushlstring(L, host_get()->params.buf, host_get()->params.len);
  return 2;  /* argv, params */
}

void command_open(lua_State *L) {
  lua_pushcfunction(L, core_process_params);
  lua_setfield(L, -2, "process_params");
}
