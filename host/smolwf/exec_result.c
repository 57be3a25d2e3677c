/*
** The result of a process request (exec, wait) as smol.sandbox returns
** it, made from the provider's result object and what the connection
** kept for the request (conn.c): the one place that says what each
** result field means.
**
**   {ok, exit_code, stdout, stderr, argv, process_id,
**    signal, timed_out, running, stdout_truncated, stderr_truncated}
**
** The last five are there only when set (a smaller table). Output comes
** from the kept captures (mode EXEC_EVENTS: the provider was asked for no
** copy of its own), from the result's own base64 copy cut at the limit
** (EXEC_COPY), or is absent (EXEC_NONE: nothing kept on purpose, and a
** cap of 0's "truncated" says nothing).
**
** Why C: it runs once per command, right where the result line is
** decoded; in Lua its calls, field reads and the intermediate table
** were a large share of an exec's cost.
*/
#include "host.h"

#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

/* The slot in f of a result field named k (n bytes), or NULL for one that does not matter. */
static int *slot_of(exec_fields *f, const char *k, size_t n) {
  switch (n) {
    case 6: return memcmp(k, "signal", 6) == 0 ? &f->signal : NULL;
    case 7: return memcmp(k, "running", 7) == 0 ? &f->running : NULL;
    case 9: return memcmp(k, "exit_code", 9) == 0 ? &f->exit_code : memcmp(k, "timed_out", 9) == 0 ? &f->timed_out : NULL;
    case 13: return memcmp(k, "stdout_base64", 13) == 0 ? &f->out_b64 : memcmp(k, "stderr_base64", 13) == 0 ? &f->err_b64 : NULL;
    case 16: return memcmp(k, "stdout_truncated", 16) == 0 ? &f->out_trunc : memcmp(k, "stderr_truncated", 16) == 0 ? &f->err_trunc : NULL;
    default: return NULL;
  }
}

void exec_fields_from_table(lua_State *L, int body, exec_fields *f) {
  memset(f, 0, sizeof *f);
  f->object = lua_istable(L, body);
  if (!f->object) return;
  lua_pushnil(L);
  while (lua_next(L, body) != 0) {
    size_t n;
    int *slot = lua_type(L, -2) == LUA_TSTRING ? slot_of(f, lua_tolstring(L, -2, &n), n) : NULL;
    if (slot != NULL) {
      lua_pushvalue(L, -1);
      lua_insert(L, -3);   /* the value stays below the key */
      *slot = lua_gettop(L) - 2;
    }
    lua_pop(L, 1);
  }
}

/* Pushes a scalar cJSON value as the Lua value json_lua.c would make; 0 for an array or object. */
static int push_scalar(lua_State *L, const cJSON *item) {
  switch (item->type & 0xff) {
    case cJSON_String: lua_pushstring(L, item->valuestring); return 1;
    case cJSON_Number: return json_push(L, item, 1, 1);
    case cJSON_True: lua_pushboolean(L, 1); return 1;
    case cJSON_False: lua_pushboolean(L, 0); return 1;
    case cJSON_NULL: lua_pushlightuserdata(L, NULL); return 1;
    default: lua_pushboolean(L, 0); return 1;   /* none of the fields may be one: as a wrong type */
  }
}

void exec_fields_from_json(lua_State *L, const cJSON *body, exec_fields *f) {
  memset(f, 0, sizeof *f);
  f->object = cJSON_IsObject(body);
  if (!f->object) return;
  for (const cJSON *child = body->child; child != NULL; child = child->next) {
    int *slot = slot_of(f, child->string, strlen(child->string));
    if (slot != NULL && push_scalar(L, child)) *slot = lua_gettop(L);
  }
}

/* The value at idx when it is a string, else 0 (signal, timed_out: anything else is dropped). */
static int string_or_none(lua_State *L, int idx) {
  return idx && lua_type(L, idx) == LUA_TSTRING ? idx : 0;
}

static int is_true(lua_State *L, int idx) {
  return idx && lua_type(L, idx) == LUA_TBOOLEAN && lua_toboolean(L, idx);
}

/* exit_code as an integer, -1 when it is absent or is none. */
static lua_Integer exit_code(lua_State *L, int idx) {
  int isint = 0;
  lua_Integer code = idx ? lua_tointegerx(L, idx, &isint) : 0;   /* as math.tointeger */
  return isint ? code : -1;
}

/*
** One stream of the result's own copy: pushes its bytes, cut at limit,
** and returns whether it is truncated; 0 and a message pushed instead of
** the bytes when it is not valid base64. An absent, null or empty copy is "".
*/
static int push_copy(lua_State *L, int b64, int trunc, size_t limit, const char *name, int *truncated) {
  *truncated = is_true(L, trunc);
  if (!b64 || lua_type(L, b64) == LUA_TLIGHTUSERDATA) {
    lua_pushliteral(L, "");
    return 1;
  }
  if (lua_type(L, b64) != LUA_TSTRING) {
    lua_pushfstring(L, "sandbox exec returned invalid base64 %s: not a string", name);
    return 0;
  }
  size_t n;
  const char *text = lua_tolstring(L, b64, &n);
  if (!b64_push_or_why(L, text, n)) {
    lua_pushfstring(L, "sandbox exec returned invalid base64 %s: %s", name, lua_tostring(L, -1));
    lua_remove(L, -2);
    return 0;
  }
  size_t got;
  const char *bytes = lua_tolstring(L, -1, &got);
  if (got > limit) {
    lua_pushlstring(L, bytes, limit);
    lua_remove(L, -2);
    *truncated = 1;
  }
  return 1;
}

/* Pushes a kept capture's bytes (or "" when none was made); returns whether it is truncated. */
static int push_kept(lua_State *L, int idx) {
  if (!idx) {
    lua_pushliteral(L, "");
    return 0;
  }
  return capture_push_taken(L, idx);
}

static void set_flag(lua_State *L, int result, const char *name, int on) {
  if (!on) return;
  lua_pushboolean(L, 1);
  lua_setfield(L, result, name);
}

int exec_result_push(lua_State *L, const exec_fields *fp, const exec_kept *k) {
  if (!fp->object) {
    lua_pushliteral(L, "the result of a process request is not a JSON object");
    return 0;
  }
  int top = lua_gettop(L);
  exec_fields f = *fp;
  int out_trunc = 0, err_trunc = 0;
  if (k->mode == EXEC_EVENTS) {
    out_trunc = push_kept(L, k->out);
    err_trunc = push_kept(L, k->err);
  } else if (k->mode == EXEC_COPY) {
    if (!push_copy(L, f.out_b64, f.out_trunc, k->limit, "stdout", &out_trunc) ||
        !push_copy(L, f.err_b64, f.err_trunc, k->limit, "stderr", &err_trunc)) {
      host_keep_top(L, top);
      return 0;
    }
  }
  int out = k->mode == EXEC_NONE ? 0 : lua_gettop(L) - 1;
  lua_Integer code = exit_code(L, f.exit_code);
  int signal = string_or_none(L, f.signal), timed_out = string_or_none(L, f.timed_out);
  int running = is_true(L, f.running);
  lua_createtable(L, 0, 8);
  int result = lua_gettop(L);
  lua_pushboolean(L, code == 0 && !timed_out && !running);
  lua_setfield(L, result, "ok");
  lua_pushinteger(L, code);
  lua_setfield(L, result, "exit_code");
  if (out) {
    lua_pushvalue(L, out);
    lua_setfield(L, result, "stdout");
    lua_pushvalue(L, out + 1);
    lua_setfield(L, result, "stderr");
  }
  if (k->argv) {
    lua_pushvalue(L, k->argv);
    lua_setfield(L, result, "argv");
  }
  if (k->pid) {
    lua_pushvalue(L, k->pid);
    lua_setfield(L, result, "process_id");
  }
  if (signal) {
    lua_pushvalue(L, signal);
    lua_setfield(L, result, "signal");
  }
  if (timed_out) {
    lua_pushvalue(L, timed_out);
    lua_setfield(L, result, "timed_out");
  }
  set_flag(L, result, "running", running);
  set_flag(L, result, "stdout_truncated", out_trunc);
  set_flag(L, result, "stderr_truncated", err_trunc);
  host_keep_top(L, top);
  return 1;
}
