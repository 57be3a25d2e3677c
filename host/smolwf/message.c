/*
** core.decode_message(line, max_depth): one JSON Lines message of the
** provider protocol, parsed with cJSON.
**
**   id, kind, body = core.decode_message(line, max_depth)
**   nil, why       = core.decode_message(...)   -- not a usable message
**   nil, false     = core.decode_message(...)   -- leave it to lua-cjson
**
** kind is "result", "error" or "event" (the first present, in that
** order), or false when none is; body is that member's value (nil when
** kind is false); id is the message's id (a number: ids are integers; a
** string id is passed on for the caller to judge). why says what was
** wrong, in the words smol.jsonl puts after "provider `P` sent ...".
**
** Why C, and why not lua-cjson: every request's reply is decoded here,
** and lua-cjson spends about 10.7k instructions on a 75-byte exec result,
** mostly growing tables key by key and building the {id, result} wrapper
** table nobody keeps. cJSON parses the line into nodes from a bump arena
** (json_arena.c) and the body alone becomes Lua values, each table made
** at its final size: about half the instructions (bench/host_bench.sh
** shows the effect on the round trip).
*/
#define _GNU_SOURCE  /* memmem */
#include "host.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

typedef struct converter {
  lua_State *L;
  int max_depth;
} converter;

static int push_value(converter *c, const cJSON *item, int depth);

static int count_children(const cJSON *item) {
  int n = 0;
  for (const cJSON *child = item->child; child != NULL; child = child->next) n++;
  return n;
}

/* Integral numbers in range become Lua integers (ids, exit codes, sizes). */
static void push_number(lua_State *L, double d) {
  if (d >= -9007199254740992.0 && d <= 9007199254740992.0 && floor(d) == d)
    lua_pushinteger(L, (lua_Integer)d);
  else
    lua_pushnumber(L, d);
}

static int push_array(converter *c, const cJSON *item, int depth) {
  lua_createtable(c->L, count_children(item), 0);
  lua_Integer i = 1;
  for (const cJSON *child = item->child; child != NULL; child = child->next) {
    if (!push_value(c, child, depth + 1)) return 0;
    lua_rawseti(c->L, -2, i++);
  }
  return 1;
}

static int push_object(converter *c, const cJSON *item, int depth) {
  lua_createtable(c->L, 0, count_children(item));
  for (const cJSON *child = item->child; child != NULL; child = child->next) {
    lua_pushstring(c->L, child->string);
    if (!push_value(c, child, depth + 1)) return 0;
    lua_rawset(c->L, -3);
  }
  return 1;
}

/* Pushes item; 0 when it nests deeper than max_depth (the stack is left as it is). */
static int push_value(converter *c, const cJSON *item, int depth) {
  lua_State *L = c->L;
  if (depth > c->max_depth) return 0;
  luaL_checkstack(L, 3, "message nested too deep");
  switch (item->type & 0xff) {
    case cJSON_String: lua_pushstring(L, item->valuestring); return 1;
    case cJSON_Number: push_number(L, item->valuedouble); return 1;
    case cJSON_True: lua_pushboolean(L, 1); return 1;
    case cJSON_False: lua_pushboolean(L, 0); return 1;
    case cJSON_NULL: lua_pushlightuserdata(L, NULL); return 1;  /* cjson.null */
    case cJSON_Array: return push_array(c, item, depth);
    default: return push_object(c, item, depth);
  }
}

static int fail(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  luaL_pushfail(L);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return 2;
}

/* "code: message" of an error reply that has no usable id. */
static int fail_without_id(lua_State *L, const cJSON *msg) {
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
  const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "code"));
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message"));
  return fail(L, "a reply without an id (%s: %s)", code ? code : "nil", text ? text : "nil");
}

/* Checks the envelope of a parsed line, then pushes id, kind, body. */
static int push_message(lua_State *L, const cJSON *msg, int max_depth, const char *line, size_t len) {
  static const char *const kinds[] = {"result", "error", "event"};
  if (!cJSON_IsObject(msg)) {
    lua_pushlstring(L, line, len < 80 ? len : 80);
    return fail(L, "a line that is not a JSON object: %s", lua_tostring(L, -1));
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (id == NULL || cJSON_IsNull(id) || cJSON_IsFalse(id)) return fail_without_id(L, msg);
  converter c = {L, max_depth};
  if (!push_value(&c, id, 1)) return fail(L, "an id nested deeper than %d levels", max_depth);
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(msg, kinds[i]);
    if (body == NULL) continue;
    lua_pushstring(L, kinds[i]);
    if (!push_value(&c, body, 2))
      return fail(L, "a line nested deeper than %d levels (too many nested arrays or objects)", max_depth);
    return 3;
  }
  lua_pushboolean(L, 0);
  return 2;
}

/* Only whitespace from p to the end of the line. */
static int only_space(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
  return p == end;
}

int message_push(lua_State *L, const char *line, size_t len, int max_depth) {
  /* cJSON's strings end at a NUL, so an escaped one would cut its string
  ** short: such a (rare) line is left to lua-cjson, which keeps it. */
  if (memchr(line, '\\', len) != NULL && memmem(line, len, "\\u0000", 6) != NULL) {
    luaL_pushfail(L);
    lua_pushboolean(L, 0);
    return 2;
  }
  const char *end = NULL;
  json_arena_reset();
  cJSON *msg = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  int n;
  if (msg == NULL || !only_space(end, line + len)) {
    size_t at = end != NULL && end >= line ? (size_t)(end - line) : 0;
    n = fail(L, "a line that is not valid JSON (at byte %d of %d)", (int)at + 1, (int)len);
  } else {
    n = push_message(L, msg, max_depth, line, len);
  }
  cJSON_Delete(msg);
  return n;
}

static int core_decode_message(lua_State *L) {
  size_t len;
  const char *line = luaL_checklstring(L, 1, &len);
  return message_push(L, line, len, (int)luaL_optinteger(L, 2, 128));
}

void message_open(lua_State *L) {
  json_arena_install();
  lua_pushcfunction(L, core_decode_message);
  lua_setfield(L, -2, "decode_message");
}
