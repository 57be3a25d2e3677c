/*
** The wire (see wire.h): reading request lines, writing reply lines.
*/
#define _GNU_SOURCE
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "linebuf.h"

#define READ_CHUNK (64 * 1024)
#define PIPE_SIZE (1024 * 1024)

/* The wire's state (the context's part). */
typedef struct wire {
  wire_hooks hooks;
  union { uv_pipe_t pipe; uv_tty_t tty; uv_stream_t stream; } in, out;
  bool in_is_file, out_is_file;      /* regular files (or /dev/null): plain read()/write() */
  bool in_open, out_open;
  uv_fs_t in_read;                   /* stdin read in progress when in_is_file */
  char chunk[READ_CHUNK];            /* every stdin read lands here: the line hook consumes it at once */
  linebuf lines;
  bool ended;                        /* the end hook ran */
  size_t queued;                     /* bytes of lines composed and not yet written */
  bool congested, finishing, abandon, out_failed;
  bool no_splice;                    /* stdout refused splice(2) (a tty): copy instead */
  uv_prepare_t flusher;              /* runs before the loop waits: writes the turn's lines */
  bool flusher_open;
  uv_buf_t *turn;                    /* lines composed this loop turn, not handed to uv_write yet */
  size_t turn_n, turn_cap;
} wire;

/* The lines of one loop turn that a try-write left over; each is freed once written. */
typedef struct outmsg {
  uv_write_t req;
  size_t len, n;
  char *first;             /* bufs[0]'s line as malloc'ed: bufs[0] may start past its written part */
  uv_buf_t *bufs;
} outmsg;

static wire *the_wire(void) {
  return CTX_PART(wire);
}

static void read_stdin_file(wire *w);
static void alloc_chunk(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* Tells the end hook, once. */
static void end_input(wire *w, wire_end why) {
  if (w->ended) return;
  w->ended = true;
  w->hooks.end(why);
}

/* ===== writing ===== */

static void free_turn(wire *w) {
  for (size_t i = 0; i < w->turn_n; i++) free(w->turn[i].base);
  w->turn_n = 0;
}

static void close_out_if_done(wire *w) {
  if (!w->finishing || !w->out_open || (w->queued != 0 && !w->abandon && !w->out_failed)) return;
  w->out_open = false;
  free_turn(w);   /* abandoned: nobody reads them */
  if (w->flusher_open) { w->flusher_open = false; uv_close((uv_handle_t *)&w->flusher, NULL); }
  if (!w->out_is_file) uv_close((uv_handle_t *)&w->out.stream, NULL);
}

static void set_congested(wire *w, bool on) {
  if (w->congested == on) return;
  w->congested = on;
  w->hooks.congested(on);
  /* A host that does not read its replies gets no new requests served either. */
  if (!w->in_open || w->in_is_file) return;
  if (on) uv_read_stop(&w->in.stream);
  else uv_read_start(&w->in.stream, alloc_chunk, on_read);
}

static void after_write(wire *w) {
  if (w->congested && w->queued < WIRE_QUEUE_LOW) set_congested(w, false);
  close_out_if_done(w);
}


static void free_outmsg(outmsg *m) {
  free(m->first);
  for (size_t i = 1; i < m->n; i++) free(m->bufs[i].base);
  free(m->bufs);
  free(m);
}

static void on_written(uv_write_t *req, int status) {
  wire *w = the_wire();
  outmsg *m = (outmsg *)req;
  w->queued -= m->len;
  free_outmsg(m);
  if (status < 0 && !w->out_failed) {
    /* The host is gone: nobody will read another reply, so stop everything. */
    w->out_failed = true;
    if (status != UV_ECANCELED) fprintf(stderr, "smolwf-provider: writing to stdout: %s\n", uv_strerror(status));
    end_input(w, WIRE_WRITE_FAILED);
  }
  after_write(w);
}

static void write_file_sync(wire *w, char *data, size_t len) {
  for (size_t done = 0; done < len && !w->out_failed;) {
    ssize_t n = write(STDOUT_FILENO, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) w->out_failed = true; else done += (size_t)n;
  }
  free(data);
}

/* Hands the turn's lines from line k on, the first `done` bytes of line k written already, to uv_write. */
static void queue_rest(wire *w, size_t k, size_t done) {
  size_t n = w->turn_n - k;
  outmsg *m = calloc(1, sizeof *m);
  uv_buf_t *bufs = m != NULL ? malloc(n * sizeof bufs[0]) : NULL;
  if (bufs == NULL) {   /* out of memory: the lines are lost, and so is the host's trust */
    free(m);
    for (size_t i = k; i < w->turn_n; i++) { w->queued -= w->turn[i].len; free(w->turn[i].base); }
    w->turn_n = 0;
    w->out_failed = true;
    return;
  }
  m->bufs = bufs;
  m->n = n;
  m->first = w->turn[k].base;
  m->len = 0;
  for (size_t i = 0; i < n; i++) { m->bufs[i] = w->turn[k + i]; m->len += m->bufs[i].len; }
  m->bufs[0].base += done;
  m->bufs[0].len -= done;
  m->len -= done;
  w->queued -= done;
  w->turn_n = 0;
  int rc = uv_write(&m->req, &w->out.stream, m->bufs, (unsigned)n, on_written);
  if (rc < 0) {
    w->queued -= m->len;
    free_outmsg(m);
    w->out_failed = true;
  }
}

/*
** Writes the turn's lines with one writev: an exec's `exited` event and
** its result (or a read's several output events) reach the host together
** and wake it once, not once per line. What the pipe cannot take now goes
** to uv_write (which keeps the order); a try-write that takes everything
** leaves no write request behind, so the loop has nothing more to run.
*/
static void flush_turn(uv_prepare_t *h) {
  wire *w = the_wire();
  uv_prepare_stop(h);
  if (w->turn_n == 0) return;
  int rc = uv_try_write(&w->out.stream, w->turn, (unsigned)w->turn_n);
  size_t done = rc > 0 ? (size_t)rc : 0, k = 0;
  for (; k < w->turn_n && done >= w->turn[k].len; k++) {
    done -= w->turn[k].len;
    w->queued -= w->turn[k].len;
    free(w->turn[k].base);
  }
  if (k < w->turn_n) queue_rest(w, k, done);
  w->turn_n = 0;
  after_write(w);
}

void wire_flush(void) {
  wire *w = the_wire();
  if (w->turn_n > 0 && w->flusher_open) flush_turn(&w->flusher);
}

void wire_send(char *data, size_t len) {
  wire *w = the_wire();
  if (!w->out_open || w->out_failed) { free(data); return; }
  if (w->out_is_file) { write_file_sync(w, data, len); return; }
  if (w->turn_n == w->turn_cap) {
    size_t cap = w->turn_cap ? 2 * w->turn_cap : 16;
    uv_buf_t *turn = realloc(w->turn, cap * sizeof *turn);
    if (turn == NULL) { free(data); w->out_failed = true; return; }
    w->turn = turn;
    w->turn_cap = cap;
  }
  w->turn[w->turn_n++] = (uv_buf_t){.base = data, .len = len};
  if (w->turn_n == 1) uv_prepare_start(&w->flusher, flush_turn);
  w->queued += len;
  if (w->queued > WIRE_QUEUE_HIGH) set_congested(w, true);
}

/* ===== moving bytes without a copy ===== */

bool wire_can_splice(void) {
  wire *w = the_wire();
  return w->out_open && !w->out_failed && !w->out_is_file && !w->no_splice && !w->finishing;
}

/* How many of fd's n bytes splice(2) moved to stdout before it was full. */
static size_t splice_out(wire *w, int fd, size_t n) {
  uv_os_fd_t out;
  if (uv_fileno((uv_handle_t *)&w->out.stream, &out) != 0) return 0;
  size_t moved = 0;
  while (moved < n) {
    ssize_t k = splice(fd, NULL, out, NULL, n - moved, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (k > 0) { moved += (size_t)k; continue; }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EINVAL) w->no_splice = true;
    break;   /* EAGAIN: stdout is full; the rest is copied and queued */
  }
  return moved;
}

/* Reads exactly n bytes that fd is known to hold; false if it held fewer. */
static bool read_held(int fd, char *to, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t k = read(fd, to + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

/* Queues the line's unwritten part (from `from`), then fd's n bytes copied after it. */
static void queue_copied(wire *w, char *line, size_t len, size_t from, int fd, size_t n) {
  size_t head = len - from;
  char *data = malloc(head + n);
  if (!data) abort();
  memcpy(data, line + from, head);
  free(line);
  if (!read_held(fd, data + head, n)) {
    /* The bytes announced cannot all follow: the host could never find the next line. */
    fprintf(stderr, "smolwf-provider: an output pipe held fewer bytes than it reported\n");
    free(data);
    w->out_failed = true;
    end_input(w, WIRE_WRITE_FAILED);
    return;
  }
  wire_send(data, head + n);
}

/*
** Splicing needs the line written first and whole, so only when nothing is
** queued (the turn so far is written now, in order) and the pipe takes the
** line at once; anything less and the bytes are copied as usual.
*/
void wire_send_spliced(char *line, size_t len, int fd, size_t n) {
  wire *w = the_wire();
  size_t written = 0, moved = 0;
  if (wire_can_splice()) {
    wire_flush();
    if (w->queued == 0) {
      uv_buf_t buf = uv_buf_init(line, (unsigned)len);
      int rc = uv_try_write(&w->out.stream, &buf, 1);
      written = rc > 0 ? (size_t)rc : 0;
    }
    if (written == len) moved = splice_out(w, fd, n);
  }
  if (written == len && moved == n) { free(line); return; }
  queue_copied(w, line, len, written, fd, n - moved);
}

/* ===== reading ===== */

static int on_line(void *ctx, char *line, size_t len) {
  wire *w = ctx;
  if (!w->in_open) return 1;
  w->hooks.line(line, len);
  return 0;
}

static void feed(wire *w, const char *data, size_t n) {
  if (linebuf_feed(&w->lines, data, n, on_line, w) < 0) end_input(w, WIRE_LINE_TOO_LONG);
}

static void on_eof(wire *w) {
  end_input(w, linebuf_pending(&w->lines) > 0 ? WIRE_EOF_MID_LINE : WIRE_EOF);
}

/*
** One buffer for every read: linebuf copies what it keeps, so the chunk is
** free again when on_read returns. (A malloc'ed 64 KiB chunk per request
** also made glibc consolidate its fast bins on every read.)
*/
static void alloc_chunk(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h; (void)suggested;
  buf->base = the_wire()->chunk;
  buf->len = sizeof the_wire()->chunk;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)s;
  wire *w = the_wire();
  if (n > 0) feed(w, buf->base, (size_t)n);
  if (n == UV_EOF) on_eof(w);
  else if (n < 0) {
    fprintf(stderr, "smolwf-provider: reading stdin: %s\n", uv_strerror((int)n));
    end_input(w, WIRE_READ_FAILED);
  }
}

static void on_file_read(uv_fs_t *req) {
  wire *w = the_wire();
  ssize_t n = req->result;
  uv_fs_req_cleanup(req);
  if (n > 0) feed(w, w->chunk, (size_t)n);
  if (!w->in_open) return;
  if (n > 0) read_stdin_file(w);
  else on_eof(w);
}

/* stdin is a regular file or a character device: read it through the thread pool. */
static void read_stdin_file(wire *w) {
  uv_buf_t buf = uv_buf_init(w->chunk, sizeof w->chunk);
  uv_fs_read(provider_ctx()->loop, &w->in_read, STDIN_FILENO, &buf, 1, -1, on_file_read);
}

/* ===== set-up and stop ===== */

static int open_stream(uv_loop_t *loop, int fd, uv_stream_t *stream, bool readable, bool *is_file) {
  uv_handle_type type = uv_guess_handle(fd);
  *is_file = false;
  if (type == UV_TTY) return uv_tty_init(loop, (uv_tty_t *)stream, fd, readable);
  if (type == UV_NAMED_PIPE || type == UV_TCP || type == UV_UDP) {
    /*
    ** A 64 KiB pipe makes every 350 KiB output event take several writes
    ** and as many wakeups on both sides; 1 MiB is the unprivileged maximum.
    ** Measured streaming 1 GiB to a C reader: 44700 write(2) calls and
    ** 36000 context switches before, 13000 and 12700 after, and ~1.3x the
    ** throughput. Not a pipe (a socket): fcntl fails, nothing to do.
    */
    fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE);
    int rc = uv_pipe_init(loop, (uv_pipe_t *)stream, 0);
    return rc < 0 ? rc : uv_pipe_open((uv_pipe_t *)stream, fd);
  }
  *is_file = true;
  return 0;
}

int wire_start(uv_loop_t *loop, const wire_hooks *hooks) {
  wire *w = the_wire();
  w->hooks = *hooks;
  linebuf_init(&w->lines, WIRE_MAX_LINE);
  int rc = open_stream(loop, STDIN_FILENO, &w->in.stream, true, &w->in_is_file);
  if (rc == 0) { w->in_open = true; rc = open_stream(loop, STDOUT_FILENO, &w->out.stream, false, &w->out_is_file); }
  if (rc < 0) {
    fprintf(stderr, "smolwf-provider: cannot use stdin/stdout: %s\n", uv_strerror(rc));
    return -1;
  }
  w->out_open = true;
  if (!w->out_is_file) { uv_prepare_init(loop, &w->flusher); w->flusher_open = true; }
  if (w->in_is_file) read_stdin_file(w);
  else uv_read_start(&w->in.stream, alloc_chunk, on_read);
  return 0;
}

void wire_stop_reading(void) {
  wire *w = the_wire();
  w->ended = true;   /* what follows is the stop the end hook would have started */
  if (!w->in_open) return;
  w->in_open = false;
  if (w->in_is_file) uv_cancel((uv_req_t *)&w->in_read);
  else uv_close((uv_handle_t *)&w->in.stream, NULL);
}

void wire_finish(bool abandon) {
  wire *w = the_wire();
  w->finishing = true;
  w->abandon = w->abandon || abandon;
  close_out_if_done(w);
}

void wire_free(void) {
  provider *ctx = provider_ctx();
  wire *w = ctx->wire;
  if (!w) return;
  linebuf_free(&w->lines);
  free_turn(w);
  free(w->turn);
  free(w);
  ctx->wire = NULL;
}
