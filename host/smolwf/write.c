/*
** Async writes of Lua strings (a child's stdin, our stdout). What the pipe
** takes at once is written on the spot (uv_try_write): a request line then
** costs one write(2) and no write request, whose callback would come only
** in the next loop turn and make a sequential round trip take two turns.
** The rest is queued with uv_write; the string is anchored by a registry
** ref until libuv's callback, so its bytes cannot be collected while the
** kernel still reads them (STYLE.md pattern 9).
*/
#include "host.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

typedef struct write_req {
  uv_write_t req;
  int str_ref;
  size_t len, *pending;
  void *owner;
  write_done_fn done;
} write_req;

static void on_written(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  *w->pending -= w->len;
  host_unref(&w->str_ref);
  write_done_fn done = w->done;
  void *owner = w->owner;
  free(w);
  if (done) done(owner, status);
}

/*
** Bytes written at once, without blocking. uv_try_write refuses (EAGAIN)
** while earlier writes are queued, which keeps the order. Any error counts
** as nothing written: uv_write then meets it too and reports it through
** the done callback, as it always did (EPIPE when the child closed stdin).
*/
static size_t write_now(uv_stream_t *stream, const char *s, size_t len) {
  uv_buf_t buf = uv_buf_init((char *)s, (unsigned)len);
  int n = uv_try_write(stream, &buf, 1);
  return n > 0 ? (size_t)n : 0;
}

/* Queues s[0..len) (the tail of the string at idx), anchoring that string. */
static int write_queued(lua_State *L, uv_stream_t *stream, int idx, const char *s,
                        size_t len, size_t *pending, void *owner, write_done_fn done) {
  lua_pushvalue(L, idx);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  write_req *w = malloc(sizeof *w);
  if (w == NULL) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    return UV_ENOMEM;
  }
  *w = (write_req){.str_ref = ref, .len = len, .pending = pending,
                   .owner = owner, .done = done};
  uv_buf_t buf = uv_buf_init((char *)s, (unsigned)len);
  int rc = uv_write(&w->req, stream, &buf, 1, on_written);
  if (rc != 0) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    free(w);
    return rc;
  }
  *pending += len;
  return 0;
}

/* done(owner, status) follows only for a part that had to be queued. */
int write_anchored(lua_State *L, uv_stream_t *stream, int idx, size_t *pending,
                   void *owner, write_done_fn done) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (len == 0) return 0;
  size_t written = write_now(stream, s, len);
  if (written == len) return 0;
  return write_queued(L, stream, idx, s + written, len - written, pending, owner, done);
}

/*
** The pieces at stack indexes first..last (strings, or integers written
** in decimal), written as one: a request line is sent from its constant
** parts and its id with one write and no Lua string of the whole line
** (making that string, and the id's text through snprintf, cost more than
** the write). What the pipe does not take at once is queued as one string.
*/
#define MAX_PIECES 16

typedef struct pieces {
  uv_buf_t bufs[MAX_PIECES];
  char digits[MAX_PIECES][24];
  unsigned n;
  size_t total;
} pieces;

/* The decimal digits of v at the end of buf (24 bytes); returns their start. */
static char *format_integer(lua_Integer v, char *buf) {
  char *p = buf + 24;
  /* negate as unsigned: no overflow for the most negative value */
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do *--p = (char)('0' + u % 10); while ((u /= 10) != 0);
  if (v < 0) *--p = '-';
  return p;
}

static void gather(lua_State *L, int first, int last, pieces *ps) {
  luaL_argcheck(L, last - first + 1 <= MAX_PIECES, first + MAX_PIECES, "too many pieces");
  ps->n = 0;
  ps->total = 0;
  for (int i = first; i <= last; i++) {
    size_t len;
    const char *s;
    if (lua_isinteger(L, i)) {
      char *digits = ps->digits[ps->n];
      s = format_integer(lua_tointeger(L, i), digits);
      len = (size_t)(digits + 24 - s);
    } else {
      s = luaL_checklstring(L, i, &len);
    }
    ps->bufs[ps->n++] = uv_buf_init((char *)s, (unsigned)len);
    ps->total += len;
  }
}

/* Pushes the bytes of ps from offset skip on as one Lua string. */
static void push_rest(lua_State *L, const pieces *ps, size_t skip) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (unsigned i = 0; i < ps->n; i++) {
    size_t len = ps->bufs[i].len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    luaL_addlstring(&b, ps->bufs[i].base + skip, len - skip);
    skip = 0;
  }
  luaL_pushresult(&b);
}

/*
** A small line is joined in a static buffer and written with write(2): the
** kernel's writev walks and copies each iovec, which for a request line of
** five pieces cost more than joining them here.
*/
static char joined[16 * 1024];

static int try_write_pieces(uv_stream_t *stream, const pieces *ps) {
  if (ps->total > sizeof joined) return uv_try_write(stream, ps->bufs, ps->n);
  size_t at = 0;
  for (unsigned i = 0; i < ps->n; i++) {
    memcpy(joined + at, ps->bufs[i].base, ps->bufs[i].len);
    at += ps->bufs[i].len;
  }
  uv_buf_t one = uv_buf_init(joined, (unsigned)at);
  return uv_try_write(stream, &one, 1);
}

int write_pieces(lua_State *L, uv_stream_t *stream, int first, int last, size_t *pending,
                 void *owner, write_done_fn done) {
  pieces ps;
  gather(L, first, last, &ps);
  if (ps.total == 0) return 0;
  int n = try_write_pieces(stream, &ps);
  size_t written = n > 0 ? (size_t)n : 0;
  if (written == ps.total) return 0;
  push_rest(L, &ps, written);
  size_t len;
  const char *rest = lua_tolstring(L, -1, &len);
  int rc = write_queued(L, stream, lua_gettop(L), rest, len, pending, owner, done);
  lua_pop(L, 1);
  return rc;
}
