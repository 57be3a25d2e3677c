/*
** Processes (see process.h).
**
** Output flows from a command's pipes either to the request it is owed to
** (an exec, or a wait on a spawned process: streamed as events and copied
** into the result up to max_output_bytes) or, for a spawned process nobody
** waits on, into a 1 MiB ring per stream whose oldest bytes give way.
** Streaming output pauses while the wire is congested (procs_set_paused);
** buffered output never pauses (the ring drops instead). Output that is
** sent as frames and no longer captured is not read at all: the wire
** splices it from the pipe (splice_output).
*/
#define _GNU_SOURCE
#include "process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "context.h"
#include "disk_cap.h"
#include "fine_timer.h"
#include "wire.h"
#include "signames.h"

#define SPAWN_BUFFER (1024 * 1024)
#define PIPE_SIZE (1024 * 1024)
/* The kernel's default pipe size: a read this large found the pipe full. */
#define DEFAULT_PIPE_SIZE (64 * 1024)
/* A whole pipe's worth per read: fewer reads and wakeups; deliver() cuts it into events. */
#define READ_BUFFER PIPE_SIZE
#define EVENT_CHUNK (256 * 1024)
/*
** How long an exec's `started` may wait for company (see hold_started).
** Longer than a scheduler tick (4 ms at HZ=250) on purpose: a timer due
** before the next tick makes the kernel reprogram the CPU's timer when
** epoll_wait sleeps and again when it wakes early, and on this VM those
** two writes cost the provider ~30 µs per exec (measured: 2 ms hold
** +30 µs CPU per exec; 5 and 10 ms holds, or none, +0).
*/
#define STARTED_HOLD_MS 5
/*
** Resting a stream (see rest): after REST_AFTER bytes, a read that found
** less than REST_BELOW lets the pipe alone for REST_US. A fast writer
** fills a 1 MiB pipe in about half a millisecond, so the rest must be a
** fraction of that, finer than libuv's timers.
*/
#define REST_AFTER (1024 * 1024)
#define REST_BELOW (PIPE_SIZE / 2)
#define REST_US 200

/* The process table (the context's part). */
typedef struct proc_table {
  proc *first;             /* every proc not yet forgotten */
  unsigned long next_id;
  bool paused;             /* the wire is congested */
  int null_fd;             /* /dev/null + 1 (0: not opened yet), see null_stdin */
  rlim_t fd_half;          /* half our descriptor limit (0: not read yet), see fds_to_spare */
  fine_timer rest_timer;   /* ends every stream's rest at once; open while any proc is (see rest) */
  /* Read callbacks copy every chunk out at once, so one buffer serves every pipe. */
  char read_buffer[READ_BUFFER];
} proc_table;

static proc_table *table(void) {
  return CTX_PART(procs);
}

static void update_reading(proc *p);
static void flush_started(proc *p);

/* ===== sending output ===== */

/* An output event of o, its data still to add. */
static cJSON *output_event(const outstream *o) {
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", o->name);
  return ev;
}

static void send_chunk(proc *p, outstream *o, const char *data, size_t n) {
  cJSON *ev = output_event(o);
  if (p->raw_output) {
    send_event_frame(p->req, ev, data, n);
  } else {
    blob b = {"data_base64", data, n};
    send_event_blobs(p->req, ev, &b, 1);
  }
  size_t room = o->captured.len < p->max_output ? p->max_output - o->captured.len : 0;
  if (n > room) o->truncated = true;
  bytes_append(&o->captured, data, n < room ? n : room);
}

/* A chunk read from a pipe: streamed to the request owed, or kept for a later wait. */
static void deliver(proc *p, outstream *o, const char *data, size_t n) {
  if (p->req) {
    flush_started(p);
    for (size_t done = 0; done < n; done += EVENT_CHUNK)
      send_chunk(p, o, data + done, n - done < EVENT_CHUNK ? n - done : EVENT_CHUNK);
  } else if (p->session) {
    ring_push(&o->buffered, SPAWN_BUFFER, data, n);
  }
}

/* Hands what a spawned process buffered to the wait that just began. */
static void deliver_buffered(proc *p, outstream *o) {
  ring *r = &o->buffered;
  if (r->dropped) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "dropped");
    cJSON_AddStringToObject(ev, "stream", o->name);
    cJSON_AddNumberToObject(ev, "bytes", (double)r->dropped);
    send_event(p->req, ev);
    r->dropped = 0;
  }
  size_t first = r->head + r->len > r->cap ? r->cap - r->head : r->len;
  if (first) deliver(p, o, r->data + r->head, first);
  if (r->len > first) deliver(p, o, r->data, r->len - first);
  r->head = r->len = 0;
}

/* ===== handles and lifetime ===== */

static void on_handle_closed(uv_handle_t *h) {
  proc *p = h->data;
  if (--p->handles_open > 0) return;
  bytes_free(&p->out.captured);
  bytes_free(&p->err.captured);
  ring_free(&p->out.buffered);
  ring_free(&p->err.buffered);
  free(p);
}

static void close_handle(proc *p, uv_handle_t *h) {
  if (uv_is_closing(h)) return;
  h->data = p;
  uv_close(h, on_handle_closed);
}

static void close_stream(proc *p, outstream *o) {
  if (!o->open) return;
  o->open = false;
  o->eof = true;
  close_handle(p, (uv_handle_t *)&o->pipe);
}

static void close_stdin(proc *p) {
  if (!p->in_open) return;
  p->in_open = false;
  close_handle(p, (uv_handle_t *)&p->in);
}

/*
** Holding a command's write ends (release_write_ends) costs two descriptors
** per running command, so we do it only while fd stays in the lower half of
** our descriptor limit: with many commands running, being able to start
** more matters more than a wake-up.
*/
static bool fds_to_spare(int fd) {
  proc_table *t = table();
  if (!t->fd_half) {
    struct rlimit rl;
    t->fd_half = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur / 2 : 1024;
  }
  return (rlim_t)fd < t->fd_half;
}

/*
** The provider keeps its own copy of the write end of a command's stdout
** and stderr pipes until it learns the command exited. Otherwise the
** command's exit closes them first (exit_files runs before the exit is
** signalled), and we were woken twice per exit: once for the pipes'
** hang-up, read EOF, slept again, then once more for the pidfd. Output
** still wakes us as it comes; only the end of a pipe now shows after the exit.
*/
static void release_write_ends(proc *p) {
  for (int i = 0; i < 2; i++)
    if (p->write_ends[i] >= 0) { close(p->write_ends[i]); p->write_ends[i] = -1; }
}

static void link_proc(proc *p) {
  proc_table *t = table();
  p->next = t->first;
  p->prev = NULL;
  if (t->first) t->first->prev = p;
  t->first = p;
}

static void unlink_proc(proc *p) {
  if (!p->session) return;
  proc_table *t = table();
  if (p->prev) p->prev->next = p->next;
  else t->first = p->next;
  if (p->next) p->next->prev = p->prev;
  p->next = p->prev = NULL;
  p->session = NULL;
  if (!t->first) fine_timer_close(&t->rest_timer);   /* nothing left to rest: no handle keeps the loop */
}

/* Forgets p: no more requests can name it; its memory goes with its last handle. */
static void proc_forget(proc *p) {
  unlink_proc(p);
  release_write_ends(p);
  close_stream(p, &p->out);
  close_stream(p, &p->err);
  close_stdin(p);
  uv_timer_t *timers[] = {&p->wall_timer, &p->idle_timer, &p->grace_timer, &p->wait_timer};
  for (size_t i = 0; i < 4; i++) close_handle(p, (uv_handle_t *)timers[i]);
}

static proc *proc_new(session *s, bool is_exec, const proc_options *o) {
  proc *p = calloc(1, sizeof *p);
  if (!p) abort();
  snprintf(p->id, sizeof p->id, "p%lu", ++table()->next_id);
  p->is_exec = is_exec;
  p->max_output = o->max_output;
  p->raw_output = o->raw_output;
  p->idle_ms = o->idle_timeout_ms;
  p->grace_ms = o->grace_ms;
  p->write_ends[0] = p->write_ends[1] = -1;
  p->out.name = "stdout";
  p->err.name = "stderr";
  uv_timer_t *timers[] = {&p->wall_timer, &p->idle_timer, &p->grace_timer, &p->wait_timer};
  for (size_t i = 0; i < 4; i++) { uv_timer_init(provider_ctx()->loop, timers[i]); p->handles_open++; }
  p->session = s;
  link_proc(p);
  return p;
}

proc *procs_find(const session *s, const char *id) {
  for (proc *p = table()->first; p; p = p->next)
    if (p->session == s && strcmp(p->id, id) == 0) return p;
  return NULL;
}

/* ===== results ===== */

/*
** The exit code as raw JSON text: cJSON prints every number with
** sprintf("%1.15g") and reads it back with sscanf to check it, twice per
** exec (the exited event and the result) for a number of at most 3 digits.
*/
static void add_exit_code(cJSON *obj, int code) {
  char text[8], *p = text + sizeof text;
  unsigned u = code < 0 ? 0u - (unsigned)code : (unsigned)code;
  *--p = '\0';
  do { *--p = (char)('0' + u % 10); u /= 10; } while (u && p > text + 1);
  if (code < 0) *--p = '-';
  cJSON_AddRawToObject(obj, "exit_code", p);
}

static void add_exit_fields(cJSON *obj, const proc *p) {
  int st = p->wait_status;
  if (WIFSIGNALED(st)) {
    add_exit_code(obj, 128 + WTERMSIG(st));
    const char *name = signal_to_name(WTERMSIG(st));
    if (name) cJSON_AddStringToObject(obj, "signal", name);
  } else {
    add_exit_code(obj, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
}

/* The result of an exec or wait: exit fields (or running), flags, and the captured output. */
static void reply_output(proc *p, cJSON *result) {
  if (p->timed_out) cJSON_AddStringToObject(result, "timed_out", p->timed_out);
  if (p->out.truncated) cJSON_AddTrueToObject(result, "stdout_truncated");
  if (p->err.truncated) cJSON_AddTrueToObject(result, "stderr_truncated");
  blob blobs[2] = {{"stdout_base64", p->out.captured.data, p->out.captured.len},
                   {"stderr_base64", p->err.captured.data, p->err.captured.len}};
  request *r = p->req;
  p->req = NULL;
  reply_result_blobs(r, result, blobs, 2);
  bytes_free(&p->out.captured);
  bytes_free(&p->err.captured);
  p->out.truncated = p->err.truncated = false;
}

/*
** Done when the command exited and both pipes reached EOF (a grandchild may
** hold them). True when p was answered and forgotten.
*/
static bool maybe_finish(proc *p) {
  if (!p->exited || !p->out.eof || !p->err.eof) return false;
  uv_timer_stop(&p->wall_timer);   /* nothing of it is left to time out */
  uv_timer_stop(&p->idle_timer);
  uv_timer_stop(&p->grace_timer);
  if (!p->req) return false;
  flush_started(p);
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", "exited");
  add_exit_fields(ev, p);
  send_event(p->req, ev);
  cJSON *result = cJSON_CreateObject();
  add_exit_fields(result, p);
  reply_output(p, result);
  replies_send_now();   /* closing the handles can wait; the host need not */
  proc_forget(p);
  return true;
}

static void drain_stream(proc *p, outstream *o);

void proc_exited(proc *p, int wait_status) {
  release_write_ends(p);   /* the pipes end once the command's descendants close theirs */
  p->exited = true;
  p->wait_status = wait_status;
  drain_stream(p, &p->out);
  drain_stream(p, &p->err);
  if (maybe_finish(p)) return;   /* proc_forget closed the pipes, after the result left */
  if (p->out.eof) close_stream(p, &p->out);
  if (p->err.eof) close_stream(p, &p->err);
}

/* ===== reading pipes ===== */

/*
** Output that only streams (nothing more to capture, sent as frames) need
** not pass through our memory: the pipe's pages move to stdout (splice_output).
*/
static outstream *outstream_of(proc *p, const uv_handle_t *pipe) {
  return pipe == (uv_handle_t *)&p->out.pipe ? &p->out : &p->err;
}

static bool splices(const proc *p, const outstream *o) {
  return p->req && p->raw_output && o->captured.len >= p->max_output && wire_can_splice();
}

/* A buffer of length 0 makes libuv report the pipe readable without reading it (UV_ENOBUFS). */
static void alloc_read(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  proc *p = h->data;
  outstream *o = outstream_of(p, h);
  buf->base = table()->read_buffer;
  buf->len = splices(p, o) ? 0 : READ_BUFFER;
}

/*
** Output pipes start at the kernel's 64 KiB; one that a read found full is
** grown to 1 MiB, so a fast writer fills a whole READ_BUFFER before we must
** wake up (fewer reads, wakeups and events). Commands with little output
** (most execs) never pay the fcntl nor hold 1 MiB of the user's pipe
** allowance (fs.pipe-user-pages-soft). Failing to grow is harmless.
*/
static void grow_pipe(outstream *o, size_t n) {
  if (o->grown || n < DEFAULT_PIPE_SIZE) return;
  o->grown = true;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&o->pipe, &fd) == 0) fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE);
}

/* ===== resting ===== */

static void end_rests(fine_timer *timer) {
  (void)timer;
  for (proc *p = table()->first; p; p = p->next) {
    if (!p->out.resting && !p->err.resting) continue;
    p->out.resting = p->err.resting = false;
    update_reading(p);
  }
}

/*
** A read that caught up with a fast writer (it found the pipe less than
** half full) leaves the pipe alone for REST_US, so the writer fills it
** and the next read takes much more: each wake-up, event and host read
** then carries ~300 KiB instead of ~40, and our reads keep the writer
** spinning on the pipe's lock less often. Measured with `head -c`
** through sb:exec (on_stdout, capture = false): resting alone gave 1.2-1.3x
** the rate, splicing alone nothing (frames of ~30 KiB: the host's cost
** per frame ate the copies saved), both together ~1.9x. Only once a
** stream has passed REST_AFTER: most commands' output is smaller, and
** gets to the host with no delay. All resting streams wake together, on
** one timer.
*/
static void rest(proc *p, outstream *o, size_t n) {
  o->streamed += n;
  if (!p->req || o->streamed < REST_AFTER || n >= REST_BELOW || o->eof) return;
  if (fine_timer_start(&table()->rest_timer, provider_ctx()->loop, REST_US, end_rests) < 0) return;
  o->resting = true;
  update_reading(p);
}

/* n bytes of output came from o's pipe: the command is not idle, and its pipe may need to grow. */
static void output_came(proc *p, outstream *o, size_t n) {
  if (p->idle_ms && !p->timed_out) uv_timer_again(&p->idle_timer);
  grow_pipe(o, n);
}

/* n bytes of output read into the table's read buffer. */
static void take_output(proc *p, outstream *o, size_t n) {
  output_came(p, o, n);
  deliver(p, o, table()->read_buffer, n);
  rest(p, o, n);
}

/* ===== moving output without a copy ===== */

static void stream_ended(proc *p, outstream *o) {
  close_stream(p, o);
  maybe_finish(p);
}

/* A pipe reported readable that holds nothing: read() tells its end from a wake-up with nothing to say. */
static void read_output(proc *p, outstream *o, int fd) {
  ssize_t n = read(fd, table()->read_buffer, READ_BUFFER);
  if (n > 0) take_output(p, o, (size_t)n);
  else if (n == 0 || (errno != EAGAIN && errno != EINTR)) stream_ended(p, o);
}

/* The pipe is readable and its output only streams: a frame whose bytes the wire takes from the pipe itself. */
static void splice_output(proc *p, outstream *o) {
  uv_os_fd_t fd;
  int held = 0;
  if (uv_fileno((uv_handle_t *)&o->pipe, &fd) != 0) return;
  if (ioctl(fd, FIONREAD, &held) < 0 || held <= 0) { read_output(p, o, fd); return; }
  size_t n = (size_t)held;
  output_came(p, o, n);
  flush_started(p);
  o->truncated = true;   /* splices() holds: nothing of this fits the capture */
  send_event_spliced(p->req, output_event(o), fd, n);
  rest(p, o, n);
}

static void on_output(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  proc *p = stream->data;
  outstream *o = outstream_of(p, (uv_handle_t *)stream);
  if (n > 0) { take_output(p, o, (size_t)n); return; }
  if (n == 0) return;
  if (n == UV_ENOBUFS) splice_output(p, o);
  else stream_ended(p, o);   /* EOF, or a read error: either way no more output */
}

/* Reads per drain at most: a descendant that keeps writing is left to the loop. */
#define DRAIN_READS 4

/*
** Once the command exited and our copies of its write ends are closed, a
** pipe nothing else holds is at its end: read it there and then, instead
** of sleeping in the loop once more to be told so. Most execs then take
** one wake-up from exit to result. A pipe a descendant still holds
** answers EAGAIN and stays with the loop; so does output that must wait
** for the host (paused). A pipe found at its end is only marked so: the
** caller closes it, after the result if that can leave now.
*/
static void drain_stream(proc *p, outstream *o) {
  proc_table *t = table();
  uv_os_fd_t fd;
  if (!o->open || o->eof || (t->paused && p->req)) return;
  if (uv_fileno((uv_handle_t *)&o->pipe, &fd) != 0) return;
  for (int i = 0; i < DRAIN_READS; i++) {
    ssize_t n = read(fd, t->read_buffer, READ_BUFFER);
    if (n > 0) { take_output(p, o, (size_t)n); continue; }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) o->eof = true;
    return;
  }
}

/* Reads while the output has somewhere to go: always into the ring, into a request unless paused. */
static void update_reading(proc *p) {
  bool paused = table()->paused && p->req;
  outstream *streams[] = {&p->out, &p->err};
  for (size_t i = 0; i < 2; i++) {
    outstream *o = streams[i];
    bool want = o->open && !o->eof && !paused && !o->resting;
    if (want == o->reading) continue;
    o->reading = want;
    if (want) uv_read_start((uv_stream_t *)&o->pipe, alloc_read, on_output);
    else uv_read_stop((uv_stream_t *)&o->pipe);
  }
  /* A command blocked on our own backpressure is not idle. */
  if (p->idle_ms && !p->timed_out && !p->exited) {
    if (paused) uv_timer_stop(&p->idle_timer);
    else if (!uv_is_active((uv_handle_t *)&p->idle_timer)) uv_timer_again(&p->idle_timer);
  }
}

void procs_set_paused(bool on) {
  table()->paused = on;
  for (proc *p = table()->first; p; p = p->next) update_reading(p);
}

/* ===== timeouts ===== */

int proc_signal(proc *p, int signo) {
  if (!p->session || p->pid <= 0) return 0;
  return p->session->backend->signal(p->session, p, signo);
}

static void on_grace_over(uv_timer_t *t) {
  proc_signal(t->data, SIGKILL);
}

static void time_out(proc *p, const char *which) {
  if (p->timed_out) return;
  p->timed_out = which;
  uv_timer_stop(&p->wall_timer);
  uv_timer_stop(&p->idle_timer);
  proc_signal(p, SIGTERM);
  p->grace_timer.data = p;
  uv_timer_start(&p->grace_timer, on_grace_over, p->grace_ms, 0);
}

static void on_wall_timeout(uv_timer_t *t) { time_out(t->data, "wall"); }
static void on_idle_timeout(uv_timer_t *t) { time_out(t->data, "idle"); }

static void start_timers(proc *p, const proc_options *o) {
  p->wall_timer.data = p->idle_timer.data = p;
  if (o->timeout_ms) uv_timer_start(&p->wall_timer, on_wall_timeout, o->timeout_ms, 0);
  /* repeat = idle: uv_timer_again() restarts the countdown at each output chunk. */
  if (o->idle_timeout_ms) uv_timer_start(&p->idle_timer, on_idle_timeout, o->idle_timeout_ms, o->idle_timeout_ms);
}

/* ===== stdin ===== */

/* One write to a command's stdin; its request (write_stdin) is answered when it is done. */
typedef struct stdin_write {
  uv_write_t req;
  proc *p;
  char *data;
  size_t len;
  request *r;
  struct stdin_write *next;   /* in p->writes */
} stdin_write;

static void on_stdin_written(uv_write_t *req, int status) {
  stdin_write *w = (stdin_write *)req;
  proc *p = w->p;
  for (stdin_write **pp = &p->writes; *pp; pp = &(*pp)->next)
    if (*pp == w) { *pp = w->next; break; }
  p->in_pending -= w->len;
  if (w->r && status < 0)
    reply_error(w->r, "io_error", "write_stdin: process %s: %s", p->id,
                status == UV_EPIPE ? "it no longer reads its stdin" : uv_strerror(status));
  else if (w->r) reply_result(w->r, cJSON_CreateObject());
  free(w->data);
  free(w);
  if (p->in_eof && p->in_pending == 0) close_stdin(p);
}

/* Queues data (taken over) to the command's stdin; r, if any, is answered once it is written. */
static void queue_stdin(proc *p, char *data, size_t len, request *r) {
  stdin_write *w = calloc(1, sizeof *w);
  if (!w) abort();
  *w = (stdin_write){.p = p, .data = data, .len = len, .r = r};
  stdin_write **tail = &p->writes;
  while (*tail) tail = &(*tail)->next;
  *tail = w;
  uv_buf_t buf = uv_buf_init(data ? data : "", (unsigned)len);
  p->in_pending += len;
  int rc = uv_write(&w->req, (uv_stream_t *)&p->in, &buf, 1, on_stdin_written);
  if (rc < 0) on_stdin_written(&w->req, rc);
}

bool proc_stdin_open(const proc *p) {
  return p->in_open && !p->in_eof;
}

void proc_write_stdin(proc *p, char *data, size_t len, bool eof, request *r) {
  if (len && p->in_pending >= PROC_STDIN_QUEUE) {
    free(data);
    reply_error(r, "limit_exceeded", "write_stdin: %zu bytes already wait for the stdin of process %s (it is not reading); "
                "at most %u may wait: send more once earlier writes are answered", p->in_pending, p->id, PROC_STDIN_QUEUE);
    return;
  }
  if (eof) p->in_eof = true;
  if (len) { queue_stdin(p, data, len, r); return; }
  free(data);
  if (p->in_eof && p->in_pending == 0) close_stdin(p);
  reply_result(r, cJSON_CreateObject());
}

/* ===== starting ===== */

/*
** A command that reads no stdin gets the provider's /dev/null (an empty,
** closed stdin, as the protocol asks) instead of a pipe of its own: one
** pipe2 and two closes fewer per exec. Opened once, kept for good.
*/
static int null_stdin(void) {
  proc_table *t = table();
  if (t->null_fd == 0) t->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC) + 1;
  return t->null_fd - 1;
}

/* Pipes for stdout and stderr, and for stdin only when want_stdin (fds[0] stays -1 otherwise). */
static int make_pipes(int fds[3][2], bool want_stdin) {
  for (int i = 0; i < 3; i++) fds[i][0] = fds[i][1] = -1;
  for (int i = want_stdin ? 0 : 1; i < 3; i++)
    if (pipe2(fds[i], O_CLOEXEC) < 0) return -errno;
  return 0;
}

static void close_fds(int fds[3][2], int end) {
  for (int i = 0; i < 3; i++)
    if (fds[i][end] >= 0) { close(fds[i][end]); fds[i][end] = -1; }
}

static void open_stream(proc *p, outstream *o, int fd) {
  uv_pipe_init(provider_ctx()->loop, &o->pipe, 0);
  uv_pipe_open(&o->pipe, fd);
  o->pipe.data = p;
  o->open = true;
  p->handles_open++;
}

/* Parent ends of the pipes into uv handles; stdin's only when it is a pipe. */
static void attach_pipes(proc *p, int fds[3][2]) {
  open_stream(p, &p->out, fds[1][0]);
  open_stream(p, &p->err, fds[2][0]);
  fds[1][0] = fds[2][0] = -1;
  if (fds[0][1] < 0) return;
  uv_pipe_init(provider_ctx()->loop, &p->in, 0);
  uv_pipe_open(&p->in, fds[0][1]);
  fds[0][1] = -1;
  p->in_open = true;
  p->handles_open++;
}

/* Starts the command of o for p; -errno when no process could be made. */
static int start_command(session *s, proc *p, const proc_options *o, bool want_stdin) {
  int fds[3][2];
  int rc = make_pipes(fds, want_stdin);
  limits lim = s->profile->limits;
  disk_watch_limits(s, &lim);
  spawn_spec spec = {
    .argv = o->argv, .envp = o->envp, .cwd = o->cwd,
    .fd_in = want_stdin ? fds[0][0] : null_stdin(), .fd_out = fds[1][1], .fd_err = fds[2][1],
    .limits = &lim,
  };
#ifdef SMOLWF_FUZZ
  /* The fuzz build (fuzz/provider_request.c) runs one harmless command, whatever the request named. */
  static char *const fuzz_argv[] = {"/bin/echo", "fuzz", NULL};
  static char *const fuzz_envp[] = {"PATH=/usr/bin:/bin", NULL};
  spec.argv = fuzz_argv;
  spec.envp = fuzz_envp;
#endif
  if (rc == 0) rc = s->backend->start(s, p, &spec);
  if (rc == 0 && fds_to_spare(fds[2][1])) {   /* held until the command exits: see release_write_ends */
    p->write_ends[0] = fds[1][1];
    p->write_ends[1] = fds[2][1];
    fds[1][1] = fds[2][1] = -1;
  }
  /* The child's ends: the command has its copies now. */
  int child_ends[3] = {fds[0][0], fds[1][1], fds[2][1]};
  for (int i = 0; i < 3; i++) if (child_ends[i] >= 0) close(child_ends[i]);
  fds[0][0] = fds[1][1] = fds[2][1] = -1;
  if (rc == 0) attach_pipes(p, fds);
  close_fds(fds, 0);
  close_fds(fds, 1);
  return rc;
}

proc *proc_start(session *s, bool is_exec, proc_options *o, int *err) {
  proc *p = proc_new(s, is_exec, o);
  /* A pipe only for data to write, or for write_stdin (a spawn given no stdin_base64). */
  bool want_stdin = o->stdin_len > 0 || (!is_exec && !o->has_stdin);
  int rc = start_command(s, p, o, want_stdin);
  if (rc < 0) {
    *err = rc;
    proc_forget(p);
    return NULL;
  }
  if (o->has_stdin) {
    p->in_eof = true;
    if (o->stdin_len) queue_stdin(p, o->stdin_data, o->stdin_len, NULL), o->stdin_data = NULL;
    else close_stdin(p);
  }
  start_timers(p, o);
  return p;
}

static void send_started(const proc *p, const request *r) {
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", "started");
  cJSON_AddStringToObject(ev, "process_id", p->id);
  send_event(r, ev);
}

static void on_started_due(uv_timer_t *t) { flush_started(t->data); }

/* Sends an exec's held `started` now, ahead of anything else it has to say. */
static void flush_started(proc *p) {
  if (!p->started_pending) return;
  p->started_pending = false;
  uv_timer_stop(&p->wait_timer);
  send_started(p, p->req);
}

/*
** An exec's `started` waits until the command's first output, its exit or
** STARTED_HOLD_MS, whichever comes first, and goes out in the same writev
** as what follows it: a short command (most execs) then wakes the host
** once, with started, exited and the result together, instead of twice.
** The order of the stream is unchanged; only process_id arrives up to
** STARTED_HOLD_MS later. An exec is never waited on, so its wait timer
** is free to count.
*/
static void hold_started(proc *p) {
  p->started_pending = true;
  p->wait_timer.data = p;
  uv_timer_start(&p->wait_timer, on_started_due, STARTED_HOLD_MS, 0);
}

void proc_exec(proc *p, request *r) {
  p->req = r;
  hold_started(p);
  update_reading(p);
}

void proc_spawned(proc *p, request *r) {
  send_started(p, r);
  update_reading(p);
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "process_id", p->id);
  reply_result(r, result);
}

/* ===== wait ===== */

static void on_wait_timeout(uv_timer_t *t) {
  proc *p = t->data;
  if (!p->req) return;
  cJSON *result = cJSON_CreateObject();
  cJSON_AddTrueToObject(result, "running");
  reply_output(p, result);
  update_reading(p);   /* back to buffering: reads again even while paused */
}

void proc_wait(proc *p, request *r, uint64_t timeout_ms) {
  p->req = r;
  deliver_buffered(p, &p->out);
  deliver_buffered(p, &p->err);
  maybe_finish(p);   /* may answer r and forget p */
  if (p->req != r) return;
  update_reading(p);
  if (timeout_ms != UINT64_MAX) {
    p->wait_timer.data = p;
    uv_timer_start(&p->wait_timer, on_wait_timeout, timeout_ms, 0);
  }
}

/* ===== a session's processes ===== */

bool procs_running(const session *s) {
  for (const proc *p = table()->first; p; p = p->next)
    if (p->session == s && !p->exited && p->pid > 0) return true;
  return false;
}

void procs_signal_running(session *s, int signo) {
  for (proc *p = table()->first; p; p = p->next)
    if (p->session == s && !p->exited && p->pid > 0) s->backend->signal(s, p, signo);
}

static void fail_request(request *r, const session *s, const proc *p) {
  reply_error(r, "unknown_session", "%s: session %s was closed while process %s ran", r->method, s->id, p->id);
}

/* Answers now every request a closing session's process owes (shutdown replies only after them). */
void procs_close_session(session *s) {
  for (proc *p = table()->first, *next; p; p = next) {
    next = p->next;
    if (p->session != s) continue;
    proc_signal(p, SIGKILL);
    if (p->req) {
      flush_started(p);
      fail_request(p->req, s, p);
    }
    p->req = NULL;
    for (stdin_write *w = p->writes; w; w = w->next)
      if (w->r) { fail_request(w->r, s, p); w->r = NULL; }
    proc_forget(p);
  }
}

void procs_free(void) {
  provider *ctx = provider_ctx();
  proc_table *t = ctx->procs;
  if (!t) return;
  if (t->null_fd > 0) close(t->null_fd - 1);
  free(t);
  ctx->procs = NULL;
}
