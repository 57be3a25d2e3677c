/*
** The connection (see server.h): reading requests, writing replies.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "linebuf.h"
#include "methods.h"
#include "process.h"
#include "server.h"
#include "session.h"

/* A request line may carry a whole write_file payload; larger is a mistake. */
#define MAX_LINE (256u * 1024 * 1024)
/* Output queue marks: pause producers above HIGH, resume below LOW. */
#define QUEUE_HIGH (8u * 1024 * 1024)
#define QUEUE_LOW (2u * 1024 * 1024)
#define READ_CHUNK (64 * 1024)
#define PIPE_SIZE (1024 * 1024)
/* The largest id that survives a trip through a double (2^53). */
#define MAX_INT_ID 9007199254740992.0

static struct {
  uv_loop_t *loop;
  union { uv_pipe_t pipe; uv_tty_t tty; uv_stream_t stream; } in, out;
  bool in_is_file, out_is_file;      /* regular files (or /dev/null): plain read()/write() */
  bool in_open, out_open;
  uv_fs_t in_read;                   /* stdin read in progress when in_is_file */
  char chunk[READ_CHUNK];            /* every stdin read lands here: feed() consumes it at once */
  linebuf lines;
  uv_signal_t signals[3];
  size_t queued;                     /* bytes of lines composed and not yet written */
  bool congested, stopping, out_failed;
  bool abandon_output;               /* stopping on a signal: do not wait for a host that may not read */
  uv_prepare_t flusher;              /* runs before the loop waits: writes the turn's lines */
  bool flusher_open;
  uv_buf_t *turn;                    /* lines composed this loop turn, not handed to uv_write yet */
  size_t turn_n, turn_cap;
} srv;

/* The lines of one loop turn that a try-write left over; each is freed once written. */
typedef struct outmsg {
  uv_write_t req;
  size_t len, n;
  char *first;             /* bufs[0]'s line as malloc'ed: bufs[0] may start past its written part */
  uv_buf_t *bufs;
} outmsg;

static void read_stdin_file(void);
static void alloc_chunk(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* ===== writing ===== */

static void free_turn(void) {
  for (size_t i = 0; i < srv.turn_n; i++) free(srv.turn[i].base);
  srv.turn_n = 0;
}

static void close_out_if_done(void) {
  if (srv.stopping && srv.out_open && (srv.queued == 0 || srv.abandon_output)) {
    srv.out_open = false;
    free_turn();   /* abandoned: nobody reads them */
    if (srv.flusher_open) { srv.flusher_open = false; uv_close((uv_handle_t *)&srv.flusher, NULL); }
    if (!srv.out_is_file) uv_close((uv_handle_t *)&srv.out.stream, NULL);
  }
}

static void set_congested(bool on) {
  if (srv.congested == on) return;
  srv.congested = on;
  if (on) procs_pause_output(); else procs_resume_output();
  /* A host that does not read its replies gets no new requests served either. */
  if (!srv.in_open || srv.in_is_file) return;
  if (on) uv_read_stop(&srv.in.stream);
  else uv_read_start(&srv.in.stream, alloc_chunk, on_read);
}

static void after_write(void) {
  if (srv.congested && srv.queued < QUEUE_LOW) set_congested(false);
  close_out_if_done();
}

static void free_outmsg(outmsg *m) {
  free(m->first);
  for (size_t i = 1; i < m->n; i++) free(m->bufs[i].base);
  free(m->bufs);
  free(m);
}

static void on_written(uv_write_t *req, int status) {
  outmsg *m = (outmsg *)req;
  srv.queued -= m->len;
  free_outmsg(m);
  if (status < 0 && !srv.out_failed) {
    /* The host is gone: nobody will read another reply, so stop everything. */
    srv.out_failed = true;
    if (status != UV_ECANCELED) fprintf(stderr, "smolwf-provider: writing to stdout: %s\n", uv_strerror(status));
    server_stop(NULL);
  }
  after_write();
}

static void write_file_sync(char *data, size_t len) {
  for (size_t done = 0; done < len && !srv.out_failed;) {
    ssize_t n = write(STDOUT_FILENO, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) srv.out_failed = true; else done += (size_t)n;
  }
  free(data);
}

/* Hands the turn's lines from line k on, the first `done` bytes of line k written already, to uv_write. */
static void queue_rest(size_t k, size_t done) {
  size_t n = srv.turn_n - k;
  outmsg *m = calloc(1, sizeof *m);
  uv_buf_t *bufs = m != NULL ? malloc(n * sizeof bufs[0]) : NULL;
  if (bufs == NULL) {   /* out of memory: the lines are lost, and so is the host's trust */
    free(m);
    for (size_t i = k; i < srv.turn_n; i++) { srv.queued -= srv.turn[i].len; free(srv.turn[i].base); }
    srv.turn_n = 0;
    srv.out_failed = true;
    return;
  }
  m->bufs = bufs;
  m->n = n;
  m->first = srv.turn[k].base;
  m->len = 0;
  for (size_t i = 0; i < n; i++) { m->bufs[i] = srv.turn[k + i]; m->len += m->bufs[i].len; }
  m->bufs[0].base += done;
  m->bufs[0].len -= done;
  m->len -= done;
  srv.queued -= done;
  srv.turn_n = 0;
  int rc = uv_write(&m->req, &srv.out.stream, m->bufs, (unsigned)n, on_written);
  if (rc < 0) {
    srv.queued -= m->len;
    free_outmsg(m);
    srv.out_failed = true;
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
  uv_prepare_stop(h);
  if (srv.turn_n == 0) return;
  int rc = uv_try_write(&srv.out.stream, srv.turn, (unsigned)srv.turn_n);
  size_t done = rc > 0 ? (size_t)rc : 0, k = 0;
  for (; k < srv.turn_n && done >= srv.turn[k].len; k++) {
    done -= srv.turn[k].len;
    srv.queued -= srv.turn[k].len;
    free(srv.turn[k].base);
  }
  if (k < srv.turn_n) queue_rest(k, done);
  srv.turn_n = 0;
  after_write();
}

/* Queues one complete line (malloc'ed, ends in '\n'); takes ownership. Written before the loop next waits. */
static void emit(char *data, size_t len) {
  if (!srv.out_open || srv.out_failed) { free(data); return; }
  if (srv.out_is_file) { write_file_sync(data, len); return; }
  if (srv.turn_n == srv.turn_cap) {
    size_t cap = srv.turn_cap ? 2 * srv.turn_cap : 16;
    uv_buf_t *turn = realloc(srv.turn, cap * sizeof *turn);
    if (turn == NULL) { free(data); srv.out_failed = true; return; }
    srv.turn = turn;
    srv.turn_cap = cap;
  }
  srv.turn[srv.turn_n++] = (uv_buf_t){.base = data, .len = len};
  if (srv.turn_n == 1) uv_prepare_start(&srv.flusher, flush_turn);
  srv.queued += len;
  if (srv.queued > QUEUE_HIGH) set_congested(true);
}

/* Appends s to the line being composed. */
static char *append(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

/*
** Builds `{"id":ID,"KIND":OBJ}\n` where the blobs become extra string
** fields of OBJ, base64-encoded straight into the line: an exec result can
** hold 64 MiB per stream, and this is its only copy.
*/
static void compose(const char *id_json, const char *kind, cJSON *obj, const blob *blobs, size_t nblobs) {
  char *text = cJSON_PrintUnformatted(obj);
  cJSON_Delete(obj);
  size_t tlen = strlen(text) - 1;   /* without the closing '}' */
  size_t total = strlen(id_json) + strlen(kind) + tlen + 32;
  for (size_t i = 0; i < nblobs; i++) total += strlen(blobs[i].field) + b64_encoded_len(blobs[i].len) + 8;
  char *line = malloc(total), *p = line;
  p = append(p, "{\"id\":", 6);
  p = append(p, id_json, strlen(id_json));
  p = append(p, ",\"", 2);
  p = append(p, kind, strlen(kind));
  p = append(p, "\":", 2);
  p = append(p, text, tlen);
  bool empty = tlen == 1;
  for (size_t i = 0; i < nblobs; i++, empty = false) {
    if (!empty) *p++ = ',';
    *p++ = '"';
    p = append(p, blobs[i].field, strlen(blobs[i].field));
    p = append(p, "\":\"", 3);
    p += b64_encode((const unsigned char *)blobs[i].data, blobs[i].len, p);
    *p++ = '"';
  }
  p = append(p, "}}\n", 3);
  free(text);
  emit(line, (size_t)(p - line));
}

void request_free(request *r) {
  if (!r) return;
  free(r->id_json);
  free(r);
}

void reply_result_blobs(request *r, cJSON *result, const blob *blobs, size_t nblobs) {
  compose(r->id_json, "result", result, blobs, nblobs);
  request_free(r);
}

void reply_result(request *r, cJSON *result) {
  reply_result_blobs(r, result, NULL, 0);
}

void reply_failure(request *r, const failure *f) {
  cJSON *err = cJSON_CreateObject();
  cJSON_AddStringToObject(err, "code", f->code);
  cJSON_AddStringToObject(err, "message", f->message);
  compose(r->id_json, "error", err, NULL, 0);
  request_free(r);
}

void reply_error(request *r, const char *code, const char *fmt, ...) {
  failure f = {.code = code};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f.message, sizeof f.message, fmt, ap);
  va_end(ap);
  reply_failure(r, &f);
}

void send_event_blobs(const request *r, cJSON *event, const blob *blobs, size_t nblobs) {
  compose(r->id_json, "event", event, blobs, nblobs);
}

void send_event(const request *r, cJSON *event) {
  compose(r->id_json, "event", event, NULL, 0);
}

bool server_congested(void) {
  return srv.congested;
}

/* ===== reading ===== */

/* The id as it must be echoed, or NULL when it is neither a string nor an integer. */
static char *id_to_json(const cJSON *id) {
  if (cJSON_IsString(id)) return cJSON_PrintUnformatted(id);
  if (!cJSON_IsNumber(id)) return NULL;
  double d = id->valuedouble;
  if (d != floor(d) || fabs(d) > MAX_INT_ID) return NULL;
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)d);
  return strdup(buf);
}

static request *request_new(char *id_json, const char *method) {
  request *r = calloc(1, sizeof *r);
  r->id_json = id_json ? id_json : strdup("null");
  snprintf(r->method, sizeof r->method, "%s", method);
  return r;
}

/* An error reply with id null, for a line whose id cannot be read (or no line at all). */
static void reject_line(const char *message, const char *line) {
  reply_error(request_new(NULL, ""), "invalid_request", "%s%s%.80s", message, line ? ": " : "", line ? line : "");
}

/* Checks the envelope of one request, then hands it to its method. */
static void handle_message(const cJSON *msg) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  char *id_json = id ? id_to_json(id) : NULL;
  if (!id_json) { reject_line("request `id` must be a string or an integer", NULL); return; }
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
  request *r = request_new(id_json, cJSON_IsString(method) ? method->valuestring : "");
  if (!cJSON_IsString(method))
    reply_error(r, "invalid_request", "request field `method` must be a string");
  else if (strlen(method->valuestring) >= sizeof r->method)
    reply_error(r, "unknown_method", "unknown method `%.64s...`", method->valuestring);
  else if (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))
    reply_error(r, "invalid_request", "%s: field `params` must be an object", r->method);
  else
    dispatch(r, cJSON_IsObject(params) ? params : NULL);
}

static int on_line(void *ctx, char *line, size_t len) {
  (void)ctx;
  if (srv.stopping) return 1;
  if (strspn(line, " \t\r") == len) return 0;   /* blank lines are ignored */
  cJSON *msg = cJSON_ParseWithLength(line, len);
  if (!cJSON_IsObject(msg)) reject_line("line is not a JSON object", line);
  else handle_message(msg);
  cJSON_Delete(msg);
  return 0;
}

static void feed(const char *data, size_t n) {
  if (linebuf_feed(&srv.lines, data, n, on_line, NULL) < 0) {
    reject_line("request line longer than 256 MiB; closing the connection", NULL);
    server_stop(NULL);
  }
}

static void on_eof(void) {
  if (linebuf_pending(&srv.lines) > 0) reject_line("the last request line has no newline before the end of input", NULL);
  server_stop(NULL);
}

/*
** One buffer for every read: linebuf copies what it keeps, so the chunk is
** free again when on_read returns. (A malloc'ed 64 KiB chunk per request
** also made glibc consolidate its fast bins on every read.)
*/
static void alloc_chunk(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h; (void)suggested;
  buf->base = srv.chunk;
  buf->len = sizeof srv.chunk;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)s;
  if (n > 0) feed(buf->base, (size_t)n);
  if (n == UV_EOF) on_eof();
  else if (n < 0) {
    fprintf(stderr, "smolwf-provider: reading stdin: %s\n", uv_strerror((int)n));
    server_stop(NULL);
  }
}

static void on_file_read(uv_fs_t *req) {
  ssize_t n = req->result;
  uv_fs_req_cleanup(req);
  if (n > 0) feed(srv.chunk, (size_t)n);
  if (srv.stopping) return;
  if (n > 0) read_stdin_file();
  else on_eof();
}

/* stdin is a regular file or a character device: read it through the thread pool. */
static void read_stdin_file(void) {
  uv_buf_t buf = uv_buf_init(srv.chunk, sizeof srv.chunk);
  uv_fs_read(srv.loop, &srv.in_read, STDIN_FILENO, &buf, 1, -1, on_file_read);
}

/* ===== set-up and stop ===== */

static int open_stream(int fd, uv_stream_t *stream, bool readable, bool *is_file) {
  uv_handle_type type = uv_guess_handle(fd);
  *is_file = false;
  if (type == UV_TTY) return uv_tty_init(srv.loop, (uv_tty_t *)stream, fd, readable);
  if (type == UV_NAMED_PIPE || type == UV_TCP || type == UV_UDP) {
    /*
    ** A 64 KiB pipe makes every 350 KiB output event take several writes
    ** and as many wakeups on both sides; 1 MiB is the unprivileged maximum.
    ** Measured streaming 1 GiB to a C reader: 44700 write(2) calls and
    ** 36000 context switches before, 13000 and 12700 after, and ~1.3x the
    ** throughput. Not a pipe (a socket): fcntl fails, nothing to do.
    */
    fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE);
    int rc = uv_pipe_init(srv.loop, (uv_pipe_t *)stream, 0);
    return rc < 0 ? rc : uv_pipe_open((uv_pipe_t *)stream, fd);
  }
  *is_file = true;
  return 0;
}

static void on_signal(uv_signal_t *h, int signo) {
  (void)h;
  fprintf(stderr, "smolwf-provider: got SIG%s, closing every session\n", signal_to_name(signo));
  srv.abandon_output = true;
  server_stop(NULL);
}

static void start_signals(void) {
  static const int signos[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < 3; i++) {
    uv_signal_init(srv.loop, &srv.signals[i]);
    uv_signal_start(&srv.signals[i], on_signal, signos[i]);
  }
}

/*
** Every output event is one malloc'ed line of ~350 KiB, freed once written.
** With glibc's defaults the heap top is trimmed (brk) as soon as the queue
** drains and grown again for the next line, so each event paid fresh page
** faults and zeroed pages (perf: ~6% of streaming in exc_page_fault,
** clear_page and memcg charging; strace: a brk per two events). Keeping up
** to TRIM_KEEP of free heap stops that churn; lines above MMAP_ABOVE (a
** large exec result) still get their own mapping, returned when freed.
** Setting either value switches off glibc's dynamic thresholds, so both are set.
*/
#define TRIM_KEEP (16 * 1024 * 1024)
#define MMAP_ABOVE (32 * 1024 * 1024)

static void tune_heap(void) {
  mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE);
  mallopt(M_TRIM_THRESHOLD, TRIM_KEEP);
}

int server_init(uv_loop_t *loop) {
  srv.loop = loop;
  tune_heap();
  linebuf_init(&srv.lines, MAX_LINE);
  int rc = open_stream(STDIN_FILENO, &srv.in.stream, true, &srv.in_is_file);
  if (rc == 0) { srv.in_open = true; rc = open_stream(STDOUT_FILENO, &srv.out.stream, false, &srv.out_is_file); }
  if (rc < 0) {
    fprintf(stderr, "smolwf-provider: cannot use stdin/stdout: %s\n", uv_strerror(rc));
    return -1;
  }
  srv.out_open = true;
  if (!srv.out_is_file) { uv_prepare_init(loop, &srv.flusher); srv.flusher_open = true; }
  start_signals();
  if (srv.in_is_file) read_stdin_file();
  else uv_read_start(&srv.in.stream, alloc_chunk, on_read);
  return 0;
}

static void stop_reading(void) {
  if (!srv.in_open) return;
  srv.in_open = false;
  if (srv.in_is_file) uv_cancel((uv_req_t *)&srv.in_read);
  else uv_close((uv_handle_t *)&srv.in.stream, NULL);
  for (size_t i = 0; i < 3; i++) uv_close((uv_handle_t *)&srv.signals[i], NULL);
}

void server_cleanup(void) {
  linebuf_free(&srv.lines);
  free_turn();
  free(srv.turn);
}

void server_stop(request *shutdown_req) {
  if (srv.stopping) {
    if (shutdown_req) reply_result(shutdown_req, cJSON_CreateObject());
    return;
  }
  srv.stopping = true;
  stop_reading();
  session_close_all();
  if (shutdown_req) reply_result(shutdown_req, cJSON_CreateObject());
  close_out_if_done();
}
