/*
** core.valid_utf8(s): s itself when it is valid UTF-8, else a copy where
** every byte that is not part of a valid sequence became U+FFFD (as the
** strict utf8.len reads sequences: no overlong forms, no surrogates).
**
** core.clean_text(s, how): a step's output made safe to show, in one pass
** (smol.workflow.text: terminal_line, terminal_lines, printable):
**   - every byte not part of a valid UTF-8 sequence becomes U+FFFD;
**   - ANSI escapes go: CSI (ESC [ params intermediates final), OSC (ESC ]
**     ... ending in BEL or ESC \), any other ESC + one byte of @-_;
**   - control bytes: how = "line" turns a tab into two spaces and drops
**     the rest (newline too); "lines" does the same but keeps newlines;
**     "xml" keeps tab, newline and CR and drops what XML 1.0 forbids.
** Text that needs none of it is returned as it is. Binary output needs
** it every few bytes, which Lua's loops and gsub passes did at a few MB/s.
*/
#include "host.h"

#include <string.h>

#include <lauxlib.h>

#include "utf8.h"

enum how { LINE, LINES, XML };

#define BLOCK 65536  /* input bytes per reservation of output room */
#define ESC 27

/* What control byte c becomes: NULL to drop it, else its replacement. */
static const char *control(unsigned char c, enum how how) {
  if (c == '\t') return how == XML ? "\t" : "  ";
  if (c == '\n') return how == LINE ? NULL : "\n";
  if (c == '\r') return how == XML ? "\r" : NULL;
  return NULL;
}

static int is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }

/* Bytes an escape sequence at s[0] == ESC takes (n bytes left), 0 when none starts there. */
static size_t escape_len(const unsigned char *s, size_t n) {
  if (n < 2) return 0;
  size_t j = 2;
  if (s[1] == '[') {   /* CSI, else ESC [ as any other two-byte escape */
    while (j < n && s[j] >= 0x30 && s[j] <= 0x3F) j++;
    while (j < n && s[j] >= 0x20 && s[j] <= 0x2F) j++;
    return j < n && s[j] >= 0x40 && s[j] <= 0x7E ? j + 1 : 2;
  }
  if (s[1] == ']') {   /* OSC, else ESC ] as any other two-byte escape */
    while (j < n && s[j] != 7 && s[j] != ESC) j++;
    if (j < n && s[j] == 7) return j + 1;
    if (j + 1 < n && s[j] == ESC && s[j + 1] == '\\') return j + 2;
    return 2;
  }
  return s[1] >= 0x40 && s[1] <= 0x5F ? 2 : 0;
}

/* Whether s has nothing to clean: valid UTF-8 and no control byte the mode changes. */
static int is_clean(const char *s, size_t n, enum how how) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!is_control(c)) continue;
    const char *to = control(c, how);
    if (to == NULL || to[0] != (char)c || to[1] != '\0') return 0;
  }
  return utf8_valid(s, n, NULL);
}

/* Cleans s[*at...] up to about `end` into out; returns the bytes written. */
static size_t clean_block(const char *s, size_t n, size_t *at, size_t end, enum how how, char *out) {
  const unsigned char *u = (const unsigned char *)s;
  char *p = out;
  size_t i = *at;
  while (i < end) {
    unsigned char c = u[i];
    size_t len;
    if (c >= 0x20 && c < 0x7F) {
      *p++ = (char)c, i++;
    } else if (c == ESC && (len = escape_len(u + i, n - i)) > 0) {
      i += len;
    } else if (is_control(c)) {
      const char *to = control(c, how);
      if (to != NULL) p += strlen(strcpy(p, to));
      i++;
    } else if ((len = utf8_sequence_len(s + i, n - i)) > 0) {
      memcpy(p, s + i, len), p += len, i += len;
    } else {
      memcpy(p, "\xEF\xBF\xBD", 3), p += 3, i++;   /* U+FFFD */
    }
  }
  *at = i;
  return (size_t)(p - out);
}

static int core_valid_utf8(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  if (utf8_valid(s, n, NULL)) {
    lua_settop(L, 1);
    return 1;
  }
  luaL_Buffer b;   /* sized exactly: a whole log may pass through here */
  char *out = luaL_buffinitsize(L, &b, utf8_repaired_len(s, n));
  luaL_pushresultsize(&b, utf8_repair_into(s, n, out));
  return 1;
}

static int core_clean_text(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  static const char *const hows[] = {"line", "lines", "xml", NULL};
  enum how how = (enum how)luaL_checkoption(L, 2, NULL, hows);
  if (is_clean(s, n, how)) {
    lua_settop(L, 1);
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t at = 0; at < n;) {
    size_t end = n - at > BLOCK ? at + BLOCK : n;
    /* each byte makes at most 3 (U+FFFD); a sequence begun before `end` may run 3 past it */
    char *room = luaL_prepbuffsize(&b, 3 * (end - at) + 8);
    luaL_addsize(&b, clean_block(s, n, &at, end, how, room));
  }
  luaL_pushresult(&b);
  return 1;
}

void clean_text_open(lua_State *L) {
  static const luaL_Reg funcs[] = {{"valid_utf8", core_valid_utf8}, {"clean_text", core_clean_text}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
