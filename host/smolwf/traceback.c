/*
** Tracebacks that show the user's frames: the frames of C functions and of
** the engine's own Lua files (lua/smol/ next to us) are hidden, with one
** line saying how many engine frames the user's code called into and that
** SMOLWF_TRACE=1 shows them. The message itself is never touched (it may
** name any path).
**
** Lua's traceback text names a frame by its short source, which cuts a
** long path to its end ("...uild/lua/smol/task.lua"), so a line cannot be
** told apart by its text: the frames are walked with lua_getstack, and a
** line is hidden when it starts with the short source of a hidden frame.
*/
#include "host.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

static char engine_source[PATH_MAX + 16];  /* "@<lua dir>/smol/" */

void traceback_set_engine_dir(const char *lua_dir) {
  snprintf(engine_source, sizeof engine_source, "@%s/smol/", lua_dir);
}

static int wants_full_trace(void) {
  const char *v = getenv("SMOLWF_TRACE");
  return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

static int is_engine_source(const char *source) {
  return engine_source[0] != '\0' && strncmp(source, engine_source, strlen(engine_source)) == 0;
}

/* A frame the user wrote: a Lua function outside the engine's files. */
static int is_user_frame(lua_State *L1, lua_Debug *ar) {
  lua_getinfo(L1, "S", ar);
  return strcmp(ar->what, "C") != 0 && !is_engine_source(ar->source);
}

/* The level of the outermost user frame from `level` up, or -1. */
static int outermost_user_level(lua_State *L1, int level) {
  lua_Debug ar;
  int found = -1;
  for (; lua_getstack(L1, level, &ar); level++)
    if (is_user_frame(L1, &ar)) found = level;
  return found;
}

/*
** Pushes a table: the "\t<short source>:" line starts of the hidden frames
** from `level` up. Sets *engine to how many engine Lua frames the user's
** code called into (the ones below the outermost user frame only ran it:
** they go without a word).
*/
static void push_hidden_starts(lua_State *L, lua_State *L1, int level, int *engine) {
  lua_Debug ar;
  int outermost = outermost_user_level(L1, level);
  lua_newtable(L);
  *engine = 0;
  for (int n = 1; lua_getstack(L1, level, &ar); level++) {
    if (is_user_frame(L1, &ar)) continue;
    *engine += strcmp(ar.what, "C") != 0 && (outermost < 0 || level < outermost);
    lua_pushfstring(L, "\t%s:", ar.short_src);
    lua_rawseti(L, -2, n++);
  }
}

static int starts_hidden(lua_State *L, int starts, const char *line, size_t len) {
  static const char tail_calls[] = "\t(...tail calls...)";
  if (len == sizeof tail_calls - 1 && memcmp(line, tail_calls, len) == 0) return 1;
  for (lua_Integer i = 1; lua_rawgeti(L, starts, i) == LUA_TSTRING; i++) {
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    int match = n <= len && memcmp(line, s, n) == 0;
    lua_pop(L, 1);
    if (match) return 1;
  }
  lua_pop(L, 1);
  return 0;
}

/* The traceback text at the stack top, its hidden lines dropped (replaced). */
static void drop_hidden_lines(lua_State *L, int starts, int engine) {
  size_t len;
  const char *text = lua_tolstring(L, -1, &len), *end = text + len;
  const char *frames = strstr(text, "\nstack traceback:");
  if (frames == NULL) return;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, text, (size_t)(frames - text));
  luaL_addstring(&b, "\nstack traceback:");
  int kept = 0;
  for (const char *line = frames + 1 + strlen("stack traceback:"); line < end;) {
    line++;  /* past the '\n' */
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    size_t n = eol ? (size_t)(eol - line) : (size_t)(end - line);
    if (!starts_hidden(L, starts, line, n)) {
      luaL_addchar(&b, '\n');
      luaL_addlstring(&b, line, n);
      kept++;
    }
    line += n;
  }
  if (engine > 0)
    lua_pushfstring(L, "\n\t(%d frame%s of smolwf's own hidden: SMOLWF_TRACE=1 shows them)", engine,
                    engine == 1 ? "" : "s");
  else lua_pushliteral(L, "");
  luaL_addvalue(&b);
  luaL_pushresult(&b);
  if (kept == 0 && engine == 0) {  /* nothing but C frames: no traceback at all */
    lua_pop(L, 1);
    lua_pushlstring(L, text, (size_t)(frames - text));
  }
  lua_replace(L, -2);
}

void host_traceback(lua_State *L, lua_State *L1, const char *msg, int level) {
  if (wants_full_trace()) {
    luaL_traceback(L, L1, msg, level);
    return;
  }
  int engine;
  push_hidden_starts(L, L1, level, &engine);
  luaL_traceback(L, L1, msg, level);
  drop_hidden_lines(L, lua_gettop(L) - 1, engine);
  lua_remove(L, -2);
}

/*
** core.traceback([thread,] msg, level): debug.traceback with the user's
** frames only, as the host's own error messages have them.
*/
static int core_traceback(lua_State *L) {
  lua_State *L1 = L;
  int arg = 0;
  if (lua_isthread(L, 1)) L1 = lua_tothread(L, 1), arg = 1;
  if (!lua_isnoneornil(L, arg + 1) && !lua_isstring(L, arg + 1)) {
    lua_settop(L, arg + 1);  /* not a message: returned as it is, as debug.traceback does */
    return 1;
  }
  const char *msg = luaL_optstring(L, arg + 1, NULL);
  int level = (int)luaL_optinteger(L, arg + 2, L1 == L ? 1 : 0);
  host_traceback(L, L1, msg, level);
  return 1;
}

void traceback_open(lua_State *L) {
  lua_pushcfunction(L, core_traceback);
  lua_setfield(L, -2, "traceback");
}
