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
