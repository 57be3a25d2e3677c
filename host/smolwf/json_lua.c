/*
** cJSON values as Lua values, for the decoder of reply lines (conn.c).
** Tables are made at their final size; integral numbers in range become
** integers (ids, exit codes, sizes); JSON null becomes a light userdata
** NULL, as lua-cjson's cjson.null is.
**
** Why cJSON and not lua-cjson: lua-cjson spends about 10.7k instructions
** on a 75-byte exec result, mostly growing tables key by key and building
** the {id, result} wrapper table nobody keeps. cJSON parses the line into
** nodes from a bump arena (json_arena.h) and only the body becomes Lua
** values: about half the instructions.
*/
#include "host.h"

#include <math.h>

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

int json_push(lua_State *L, const cJSON *item, int max_depth, int depth) {
  converter c = {L, max_depth};
  return push_value(&c, item, depth);
}
