/*
** core.json_problem(line): whether a JSON Lines message means exactly what
** its text says, by the rules the bundled provider holds requests to
** (docs/protocol.md, "Envelope"). For the Lua side of the wire, whose
** decoder (lua-cjson) keeps the last of two keys, reads 9007199254740993
** as ...992 and takes text after the value in its stride only sometimes:
** the Lua provider framework checks each request with it, and the
** conformance kit each reply.
**
**   core.json_problem(line) -> nil | message, kind [, key]
**   core.json_decode(line [, max_depth]) -> value | nil, message, kind [, key]
**
** kind: "utf8" (not valid UTF-8), "json" (not one JSON value), "trailing"
** (text after it; key: the length of the value before it, an integer),
** "duplicate" (key: the key twice), "id" (a number id that is not an integer of magnitude below
** 2^53), "nul" (a string holds \u0000; lua-cjson keeps it, C readers cut
** there). The first that applies, in that order.
*/
#include "host.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

#include "json_rules.h"
#include "utf8.h"

/* How much of a key a message quotes. */
#define KEY_QUOTE 64

static int problem(lua_State *L, const char *kind, const char *fmt, ...) {
  char text[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  lua_pushstring(L, text);
  lua_pushstring(L, kind);
  return 2;
}

static int space_only(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
  return p == end;
}

/* The top-level id, when it is a number no double holds exactly enough to echo. */
static int id_out_of_range(const cJSON *msg) {
  const cJSON *id = cJSON_IsObject(msg) ? cJSON_GetObjectItemCaseSensitive(msg, "id") : NULL;
  if (!cJSON_IsNumber(id)) return 0;
  double d = id->valuedouble;
  return floor(d) != d || fabs(d) >= 9007199254740992.0;
}

/* The checks after the parse; the message and kind pushed (and 2 returned), or 0. */
static int tree_problem(lua_State *L, const cJSON *msg) {
  const char *dup = json_duplicate_key(msg);
  if (dup) {
    int n = problem(L, "duplicate", "duplicate key `%.*s`: each key may occur once in an object",
                    (int)utf8_prefix(dup, strlen(dup), KEY_QUOTE), dup);
    lua_pushstring(L, dup);
    return n + 1;
  }
  if (id_out_of_range(msg))
    return problem(L, "id", "`id` must be a string or an integer of magnitude below 2^53");
  return 0;
}

/*
** The checks of a line; 0 with the parsed message in *out (to be
** cJSON_Delete'd), or the problem pushed (its count returned) and *out NULL.
*/
static int line_problem(lua_State *L, const char *line, size_t len, cJSON **out) {
  size_t bad;
  *out = NULL;
  if (!utf8_valid(line, len, &bad))
    return problem(L, "utf8", "the line is not valid UTF-8 (byte 0x%02x at offset %zu)", (unsigned char)line[bad], bad);
  const char *end = NULL;
  json_arena_reset(&host_get()->json_arena);
  cJSON *msg = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  if (msg == NULL) return problem(L, "json", "the line is not valid JSON");
  int n;
  if (!space_only(end, line + len)) {
    n = problem(L, "trailing", "text after the JSON value (at offset %zu): one message per line", (size_t)(end - line));
    lua_pushinteger(L, (lua_Integer)(end - line));
    n++;
  } else
    n = tree_problem(L, msg);
  if (!n && memchr(line, '\\', len) && json_each_nul_escape((char *)line, len, NULL))
    n = problem(L, "nul", "a string holds \\u0000 (NUL)");
  if (n) cJSON_Delete(msg);
  else *out = msg;
  return n;
}

static int core_json_problem(lua_State *L) {
  size_t len;
  const char *line = luaL_checklstring(L, 1, &len);
  cJSON *msg;
  int n = line_problem(L, line, len, &msg);
  cJSON_Delete(msg);
  return n;
}

/*
** core.json_decode(line [, max_depth]) -> value | nil, message, kind [, key]:
** the line's value when json_problem finds nothing, from the one parse that
** checked it (json_lua.c's values: integral numbers as integers, null as
** cjson.null), so a reader that checks each line parses it once.
*/
static int core_json_decode(lua_State *L) {
  size_t len;
  const char *line = luaL_checklstring(L, 1, &len);
  int max_depth = (int)luaL_optinteger(L, 2, 64);
  cJSON *msg;
  int n = line_problem(L, line, len, &msg);
  if (n) {
    lua_pushnil(L);
    lua_insert(L, -n - 1);
    return n + 1;
  }
  int ok = json_push(L, msg, max_depth, 1);
  cJSON_Delete(msg);
  if (ok) return 1;
  lua_pushnil(L);
  lua_pushfstring(L, "the line nests deeper than %d levels", max_depth);
  lua_pushliteral(L, "depth");
  return 3;
}

void json_check_open(lua_State *L) {
  lua_pushcfunction(L, core_json_problem);
  lua_setfield(L, -2, "json_problem");
  lua_pushcfunction(L, core_json_decode);
  lua_setfield(L, -2, "json_decode");
}
