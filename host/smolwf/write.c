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
** Buffers written as one: a request line goes out from its parts (its
** constant text, its id's digits, its params) with one write and no Lua
** string of the whole line (making that string cost more than the write).
** What the pipe does not take at once is queued as one string.
*/

/* Pushes the bytes of bufs from offset skip on as one Lua string. */
static void push_rest(lua_State *L, const uv_buf_t *bufs, unsigned n, size_t skip) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (unsigned i = 0; i < n; i++) {
    size_t len = bufs[i].len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    luaL_addlstring(&b, bufs[i].base + skip, len - skip);
    skip = 0;
  }
  luaL_pushresult(&b);
}

/*
** A small line is joined in a buffer of the host and written with write(2):
** the kernel's writev walks and copies each iovec, which for a request line
** of a few pieces cost more than joining them here.
*/
static int try_write_bufs(uv_stream_t *stream, const uv_buf_t *bufs, unsigned n, size_t total) {
  char *joined = host_get()->write_joined;
  if (total > sizeof host_get()->write_joined) return uv_try_write(stream, bufs, n);
  size_t at = 0;
  for (unsigned i = 0; i < n; i++) {
    memcpy(joined + at, bufs[i].base, bufs[i].len);
    at += bufs[i].len;
  }
  uv_buf_t one = uv_buf_init(joined, (unsigned)at);
  return uv_try_write(stream, &one, 1);
}

int write_bufs(lua_State *L, uv_stream_t *stream, const uv_buf_t *bufs, unsigned n, size_t *pending,
               void *owner, write_done_fn done) {
  size_t total = 0;
  for (unsigned i = 0; i < n; i++) total += bufs[i].len;
  if (total == 0) return 0;
  int rc = try_write_bufs(stream, bufs, n, total);
  size_t written = rc > 0 ? (size_t)rc : 0;
  if (written == total) return 0;
  push_rest(L, bufs, n, written);
  size_t len;
  const char *rest = lua_tolstring(L, -1, &len);
  rc = write_queued(L, stream, lua_gettop(L), rest, len, pending, owner, done);
  lua_pop(L, 1);
  return rc;
}
