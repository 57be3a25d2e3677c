/*
** Reading a pipe into a Lua callback, in "lines" mode (split by linebuf,
** with its line cap) or "chunks" mode. The callback gets each line or
** chunk, then nil once at EOF, or nil plus a message on a read error or an
** over-long line, after which reading stops and the pipe is closed.
** Used by process.c (a child's stdout/stderr) and stdio.c (our stdin).
** A C sink in lines mode may also say that bytes after a line are a
** frame (a provider's raw_output, docs/protocol.md), and so may a Lua
** callback (reader_expect_frame): those go to the sink's frame function,
** or to the callback as (bytes, nil, true), whole, never split into lines.
*/
#include "host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

enum { READER_IDLE, READER_READING, READER_DONE, READER_CLOSING, READER_CLOSED };

/*
** One read buffer for the whole host: read callbacks consume it before
** they return and nested loop runs are refused, so it is never shared.
** As big as the 1 MiB pipes providers make with F_SETPIPE_SZ (the bundled
** one does): a 64 KiB output event is an ~87 KiB line, which can sit whole
** only in a read bigger than that, and only a whole line skips the copy
** into the linebuf (see feed_lines).
*/

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  (void)handle;
  (void)suggested;
  *buf = uv_buf_init(host_get()->read_buffer, sizeof host_get()->read_buffer);
}

/*
** Calls the sink, or the Lua callback with (data) or (nil, err); a no-op
** once detached. A sink's line may announce a frame: its bytes come next.
*/
static void call_back(reader *r, char *data, size_t n, const char *err) {
  if (r->sink.fn != NULL) {
    size_t frame = r->sink.fn(r->sink.ctx, data, n, err);
    if (data != NULL && r->lines) r->frame.need = frame;
    return;
  }
  if (r->cb_ref == LUA_NOREF) return;
  lua_State *L = host_get()->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->cb_ref);
  if (data != NULL) lua_pushlstring(L, data, n);
  else lua_pushnil(L);
  if (err != NULL) lua_pushstring(L, err);
  host_pcall(err != NULL ? 2 : 1);
}

static int on_line(void *ctx, char *line, size_t len) {
  reader *r = ctx;
  call_back(r, line, len, NULL);
  return r->state != READER_READING;  /* the callback closed us: stop */
}

static void forget_frame(reader *r) {
  free(r->frame.buf);
  r->frame.buf = NULL;
  r->frame.need = r->frame.have = 0;
}

static void on_closed(uv_handle_t *handle) {
  reader *r = handle->data;
  linebuf_free(&r->lb);
  forget_frame(r);
  r->state = READER_CLOSED;
  if (r->on_closed) r->on_closed(r, r->owner);
}

/* EOF or an error: deliver what is left, then nil, then close the pipe. */
static void finish(reader *r, const char *err) {
  r->state = READER_DONE;
  uv_read_stop(&r->h.stream);
  size_t tail = linebuf_pending(&r->lb);
  char cut[96];
  if (err == NULL && r->frame.need > 0) {
    snprintf(cut, sizeof cut, READER_FRAME_CUT " (%zu of its %zu bytes came)", r->frame.have, r->frame.need);
    err = cut;
  } else if (err == NULL && r->lines && tail > 0) {  /* a last line without '\n' */
    call_back(r, r->lb.buf, tail, NULL);
  }
  forget_frame(r);
  call_back(r, NULL, 0, err);
  reader_close(r);
  if (r->on_done) r->on_done(r, r->owner);
}

static void too_long(reader *r) {
  char msg[80];
  snprintf(msg, sizeof msg, "line longer than %zu bytes", r->max_line);
  finish(r, msg);
}

/* A frame's bytes to the sink's frame function, or to the Lua callback as (bytes, nil, true). */
static void frame_to(reader *r, char *data, size_t n) {
  if (r->sink.frame != NULL) {
    r->sink.frame(r->sink.ctx, data, n);
  } else if (r->cb_ref != LUA_NOREF) {
    lua_State *L = host_get()->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->cb_ref);
    lua_pushlstring(L, data, n);
    lua_pushnil(L);
    lua_pushboolean(L, 1);
    host_pcall(3);
  }
}

/*
** Takes up to n bytes of the frame being read; returns how many. A frame
** that sits whole in the read goes to the sink from it; one cut by the
** end of a read is gathered first (the sink bounded its size).
*/
static size_t feed_frame(reader *r, char *data, size_t n) {
  size_t need = r->frame.need;
  if (r->frame.have == 0 && n >= need) {
    r->frame.need = 0;
    frame_to(r, data, need);
    return need;
  }
  if (r->frame.buf == NULL && (r->frame.buf = malloc(need)) == NULL) abort();
  size_t take = n < need - r->frame.have ? n : need - r->frame.have;
  memcpy(r->frame.buf + r->frame.have, data, take);
  if ((r->frame.have += take) == need) {
    char *whole = r->frame.buf;
    r->frame.buf = NULL;
    r->frame.need = r->frame.have = 0;
    frame_to(r, whole, need);
    free(whole);
  }
  return take;
}

/*
** Splits data into lines for the callback. A line that sits whole in the
** read buffer goes to Lua straight from it (lua_pushlstring needs no '\0',
** so the copy into the linebuf that linebuf_feed makes is skipped); a line
** begun in an earlier read, or cut by the end of this one, goes through
** the linebuf; the bytes of a frame a line announced go to feed_frame.
** Stops when the callback closed us.
*/
static void feed_lines(reader *r, char *data, size_t n) {
  const char *end = data + n;
  while (data < end && r->state == READER_READING) {
    if (r->frame.need > 0) {
      data += feed_frame(r, data, (size_t)(end - data));
      continue;
    }
    char *nl = memchr(data, '\n', (size_t)(end - data));
    size_t upto = nl != NULL ? (size_t)(nl - data) + 1 : (size_t)(end - data);
    int over_long;
    if (nl != NULL && linebuf_pending(&r->lb) == 0) {
      over_long = (size_t)(nl - data) > r->max_line;
      if (!over_long) call_back(r, data, (size_t)(nl - data), NULL);
    } else {
      over_long = linebuf_feed(&r->lb, data, upto, on_line, r) < 0;
    }
    if (over_long && r->state == READER_READING) too_long(r);
    data += upto;
  }
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf) {
  reader *r = stream->data;
  if (n > 0 && r->lines) feed_lines(r, buf->base, (size_t)n);
  else if (n > 0) call_back(r, buf->base, (size_t)n, NULL);
  else if (n == UV_EOF) finish(r, NULL);
  else if (n < 0) finish(r, uv_strerror((int)n));
}

static void init_fields(reader *r, int lines, size_t max_line, void *owner,
                        reader_done_fn on_done, reader_done_fn on_closed_fn) {
  r->lines = lines;
  r->max_line = max_line;
  r->cb_ref = LUA_NOREF;
  r->state = READER_IDLE;
  r->owner = owner;
  r->on_done = on_done;
  r->on_closed = on_closed_fn;
  r->sink = (line_sink){NULL, NULL, NULL};
  r->frame.buf = NULL;
  r->frame.need = r->frame.have = 0;
  linebuf_init(&r->lb, max_line);
}

/* A pipe for a child's output (uv_spawn connects it). */
int reader_init(reader *r, uv_loop_t *loop, int lines, size_t max_line,
                void *owner, reader_done_fn on_done, reader_done_fn on_closed_fn) {
  init_fields(r, lines, max_line, owner, on_done, on_closed_fn);
  int rc = uv_pipe_init(loop, &r->h.pipe, 0);
  r->h.handle.data = r;
  if (rc != 0) r->state = READER_CLOSED;
  return rc;
}

/*
** An fd we already have (a dup of our stdin): a pipe or a terminal; it is
** closed with the reader. On failure after the handle was initialized the
** caller still calls reader_close (on_closed follows); reader_finished()
** says whether that is needed.
*/
int reader_init_fd(reader *r, uv_loop_t *loop, int fd, int lines, size_t max_line,
                   void *owner, reader_done_fn on_done, reader_done_fn on_closed_fn) {
  init_fields(r, lines, max_line, owner, on_done, on_closed_fn);
  r->h.handle.data = r;
  int rc;
  if (uv_guess_handle(fd) == UV_TTY) {
    rc = uv_tty_init(loop, &r->h.tty, fd, 0);
    if (rc != 0) r->state = READER_CLOSED;  /* nothing was initialized */
  } else {
    rc = uv_pipe_init(loop, &r->h.pipe, 0);
    if (rc != 0) r->state = READER_CLOSED;
    else rc = uv_pipe_open(&r->h.pipe, fd);
  }
  r->h.handle.data = r;
  return rc;
}

int reader_start(reader *r) {
  int rc = uv_read_start(&r->h.stream, on_alloc, on_read);
  if (rc == 0) r->state = READER_READING;
  return rc;
}

void reader_end(reader *r) {
  if (r->state != READER_READING) return;
  linebuf_free(&r->lb);   /* what came without its newline goes */
  linebuf_init(&r->lb, r->max_line);
  finish(r, NULL);
}

void reader_detach(reader *r) {
  host_unref(&r->cb_ref);
  r->sink = (line_sink){NULL, NULL, NULL};
  forget_frame(r);
}

void reader_close(reader *r) {
  reader_detach(r);
  if (r->state >= READER_CLOSING) return;
  if (r->state == READER_READING) uv_read_stop(&r->h.stream);
  r->state = READER_CLOSING;
  uv_close(&r->h.handle, on_closed);
}

int reader_finished(const reader *r) { return r->state >= READER_DONE; }

int reader_expect_frame(reader *r, size_t n) {
  if (!r->lines || r->state != READER_READING || r->frame.need > 0 || n > r->max_line) return -1;
  r->frame.need = n;
  return 0;
}
