/*
** core.spawn and the process handle (metatable "smol.process").
**
** Ownership: the C struct (libuv's memory) lives from spawn until every
** uv handle in it is closed AND Lua let go of it (proc:close() or __gc);
** whichever comes last frees it. The Lua box only points at it. While
** callbacks may still come (until on_exit was delivered), the box is
** anchored by a registry ref, so a dropped handle still reports its exit.
** Every process is on one list until freed, so the exit path can kill
** and reap whatever is still running.
*/
#define _GNU_SOURCE  /* pipe2 */
#include "host.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#define PROCESS_MT "smol.process"

enum { STDIN_NONE, STDIN_OPEN, STDIN_CLOSING };

typedef struct proc_box { proc *p; int pid; } proc_box;

struct proc {
  uv_process_t handle;
  uv_pipe_t stdin_pipe;
  uv_shutdown_t shutdown_req;
  reader out, err;
  int has_stdin, has_out, has_err, stdin_state;
  int open_handles;         /* uv handles not closed yet (close callback still to come) */
  int exited, finished;     /* the child was reaped; on_exit was delivered */
  int64_t exit_status;
  int term_signal, process_group, pid;
  size_t pending_write;
  int self_ref, exit_ref;   /* anchor of the box; the on_exit callback */
  double drain;             /* see spawn_opts; the timer runs once it exited */
  uv_timer_t drain_timer;
  proc_box *box;            /* NULL once Lua let go */
  proc *prev, *next;        /* host_get()->procs */
};


static void link_proc(proc *p) {
  p->next = host_get()->procs;
  if (host_get()->procs) host_get()->procs->prev = p;
  host_get()->procs = p;
}

static void unlink_proc(proc *p) {
  if (p->prev) p->prev->next = p->next;
  else host_get()->procs = p->next;
  if (p->next) p->next->prev = p->prev;
}

static void maybe_free(proc *p) {
  if (p->open_handles > 0 || p->box != NULL) return;
  unlink_proc(p);
  free(p);
}

static void on_handle_closed(uv_handle_t *handle) {
  proc *p = handle->data;
  p->open_handles--;
  maybe_free(p);
}

static void on_reader_closed(reader *r, void *owner) {
  (void)r;
  proc *p = owner;
  p->open_handles--;
  maybe_free(p);
}

/* {=================== stdin ===================} */

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  proc *p = req->data;
  if (!uv_is_closing((uv_handle_t *)&p->stdin_pipe))
    uv_close((uv_handle_t *)&p->stdin_pipe, on_handle_closed);
}

/* Lets queued writes finish, then closes: the child sees end-of-file. */
static void close_stdin(proc *p) {
  if (p->stdin_state != STDIN_OPEN) return;
  p->stdin_state = STDIN_CLOSING;
  p->shutdown_req.data = p;
  if (uv_shutdown(&p->shutdown_req, (uv_stream_t *)&p->stdin_pipe, on_shutdown) != 0)
    on_shutdown(&p->shutdown_req, 0);
}

/* Closes at once, cancelling queued writes (the child is gone, or we are). */
static void abort_stdin(proc *p) {
  p->stdin_state = STDIN_NONE;
  uv_handle_t *h = (uv_handle_t *)&p->stdin_pipe;
  if (p->has_stdin && !uv_is_closing(h)) uv_close(h, on_handle_closed);
}

static void on_written(void *owner, int status) {
  if (status < 0 && status != UV_ECANCELED) abort_stdin(owner);  /* EPIPE: the child closed it */
}

/* {=================== exit ===================} */

/* exit_code is 128+signo when killed, as a shell reports it */
static void push_exit(lua_State *L, const proc *p) {
  if (p->term_signal == 0) {
    lua_pushinteger(L, (lua_Integer)p->exit_status);
    lua_pushnil(L);
    return;
  }
  lua_pushinteger(L, 128 + p->term_signal);
  const char *name = signal_to_name(p->term_signal);
  if (name) lua_pushstring(L, name);
  else lua_pushfstring(L, "%d", p->term_signal);
}

static void stop_drain(proc *p);

/* on_exit comes once the child exited AND its output reached EOF (or the drain deadline passed). */
static void deliver_exit(proc *p) {
  if (p->finished || !p->exited) return;
  if (p->has_out && !reader_finished(&p->out)) return;
  if (p->has_err && !reader_finished(&p->err)) return;
  p->finished = 1;
  stop_drain(p);
  if (p->exit_ref != LUA_NOREF) {
    lua_State *L = host_get()->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, p->exit_ref);
    push_exit(L, p);
    host_pcall(2);
  }
  host_unref(&p->exit_ref);
  host_unref(&p->self_ref);  /* no more callbacks: only Lua keeps the box alive */
}

/*
** The drain deadline passed: whatever still holds the child's output open
** (a descendant in a session of its own) no longer delays its exit. The
** output ends there, as at EOF, and on_exit follows.
*/
static void on_drain_deadline(uv_timer_t *t) {
  proc *p = t->data;
  uv_close((uv_handle_t *)t, on_handle_closed);
  if (p->has_out) reader_end(&p->out);
  if (p->has_err) reader_end(&p->err);
  deliver_exit(p);
}

static int draining(const proc *p) {
  return (p->has_out && !reader_finished(&p->out)) || (p->has_err && !reader_finished(&p->err));
}

static void arm_drain(proc *p) {
  if (p->drain < 0 || !draining(p) || uv_timer_init(p->handle.loop, &p->drain_timer) != 0) return;
  p->drain_timer.data = p;
  p->open_handles++;
  uv_timer_start(&p->drain_timer, on_drain_deadline, (uint64_t)(p->drain * 1000 + 0.5), 0);
}

static void on_process_exit(uv_process_t *handle, int64_t status, int signo) {
  proc *p = handle->data;
  p->exited = 1;
  p->exit_status = status;
  p->term_signal = signo;
  arm_drain(p);
  uv_close((uv_handle_t *)handle, on_handle_closed);
  abort_stdin(p);
  deliver_exit(p);
}

/* Once on_exit came, the drain timer (if any) has nothing left to do. */
static void stop_drain(proc *p) {
  if (p->drain_timer.data == NULL || uv_is_closing((uv_handle_t *)&p->drain_timer)) return;
  uv_close((uv_handle_t *)&p->drain_timer, on_handle_closed);
}

static void on_stream_done(reader *r, void *owner) {
  (void)r;
  deliver_exit(owner);
}

/* {=================== spawn ===================} */

/*
** The child's end of a pipe goes in as an inherited fd (child_fd: our own
** fd, or its end of the pipes made by open_os_pipes).
*/
static void set_output(uv_stdio_container_t *c, int mode, int child_fd) {
  if (mode == STREAM_IGNORE) {
    c->flags = UV_IGNORE;  /* libuv points fds 0-2 at /dev/null then */
  } else {
    c->flags = UV_INHERIT_FD;
    c->data.fd = child_fd;
  }
}

/*
** A pipe(2) whose one end the initialized handle h takes (nonblocking from
** then on) and whose other end, *child_fd, the child inherits. Not libuv's
** UV_CREATE_PIPE: that makes a socketpair, and a round trip over unix
** sockets costs the kernel about 2 us more than over pipes (bench/).
** Both ends are close-on-exec: no other child inherits them.
*/
static int os_pipe(uv_pipe_t *h, int child_reads, int *child_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
  int rc = uv_pipe_open(h, child_reads ? fds[1] : fds[0]);
  if (rc != 0) {
    close(fds[0]);
    close(fds[1]);
    return rc;
  }
  *child_fd = child_reads ? fds[0] : fds[1];
  return 0;
}

/* The pipes of init_pipes' handles; child_fds[i] is -1 where there is none. */
static int open_os_pipes(proc *p, int child_fds[3]) {
  int rc = 0;
  if (p->has_stdin) rc = os_pipe(&p->stdin_pipe, 1, &child_fds[0]);
  if (rc == 0 && p->has_out) rc = os_pipe(&p->out.h.pipe, 0, &child_fds[1]);
  if (rc == 0 && p->has_err) rc = os_pipe(&p->err.h.pipe, 0, &child_fds[2]);
  return rc;
}

static void close_child_fds(const int child_fds[3]) {
  for (int i = 0; i < 3; i++)
    if (child_fds[i] >= 0) close(child_fds[i]);
}

/* Initializes the pipes the options ask for; each counts as an open handle. */
static int init_pipes(uv_loop_t *loop, proc *p, const spawn_opts *o) {
  if (o->stdin_pipe) {
    int rc = uv_pipe_init(loop, &p->stdin_pipe, 0);
    if (rc != 0) return rc;
    p->stdin_pipe.data = p;
    p->has_stdin = 1;
    p->open_handles++;
  }
  reader *rs[2] = {&p->out, &p->err};
  int modes[2] = {o->out_mode, o->err_mode}, *has[2] = {&p->has_out, &p->has_err};
  for (int i = 0; i < 2; i++) {
    if (modes[i] < STREAM_LINES) continue;
    int rc = reader_init(rs[i], loop, modes[i] == STREAM_LINES, o->max_line, p,
                         on_stream_done, on_reader_closed);
    if (rc != 0) return rc;
    *has[i] = 1;
    p->open_handles++;
  }
  return 0;
}

/* Runs uv_spawn; the child's pipe ends are ours to close after it. */
static int spawn_child(uv_loop_t *loop, proc *p, const spawn_opts *o,
                       const int child_fds[3]) {
  uv_stdio_container_t stdio[3];
  stdio[0].flags = o->stdin_pipe ? UV_INHERIT_FD : UV_IGNORE;
  stdio[0].data.fd = child_fds[0];
  set_output(&stdio[1], o->out_mode, o->out_mode == STREAM_INHERIT ? 1 : child_fds[1]);
  set_output(&stdio[2], o->err_mode, o->err_mode == STREAM_INHERIT ? 2 : child_fds[2]);
  uv_process_options_t opts;
  memset(&opts, 0, sizeof opts);
  opts.exit_cb = on_process_exit;
  opts.file = o->file;
  opts.args = o->args;
  opts.env = o->env;
  opts.cwd = o->cwd;
  opts.stdio = stdio;
  opts.stdio_count = 3;
  /* a new session makes the child lead its own process group */
  opts.flags = o->process_group ? UV_PROCESS_DETACHED : 0;
  int rc = uv_spawn(loop, &p->handle, &opts);
  p->handle.data = p;
  /* even a failed uv_spawn leaves an initialized handle to close */
  if (p->handle.loop != NULL) p->open_handles++;
  return rc;
}

static int start_process(uv_loop_t *loop, proc *p, const spawn_opts *o) {
  p->process_group = o->process_group;
  p->drain = o->drain;
  int rc = init_pipes(loop, p, o);
  if (rc != 0) return rc;
  int child_fds[3] = {-1, -1, -1};
  rc = open_os_pipes(p, child_fds);
  if (rc == 0) rc = spawn_child(loop, p, o, child_fds);
  close_child_fds(child_fds);  /* the child has its copies (or failed) */
  return rc;
}

/* A spawn that failed: close whatever was opened; freed by the close callbacks. */
static void abandon(proc *p) {
  p->exited = p->finished = 1;
  abort_stdin(p);
  if (p->has_out) reader_close(&p->out);
  if (p->has_err) reader_close(&p->err);
  if (p->handle.loop != NULL) uv_close((uv_handle_t *)&p->handle, on_handle_closed);
  else maybe_free(p);
}

static int ref_field(lua_State *L, int opts, const char *name) {
  lua_getfield(L, opts, name);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* The spawn succeeded: the box owns p, callbacks are anchored, readers run. */
static void attach(lua_State *L, int opts, proc_box *box, proc *p) {
  box->p = p;
  box->pid = p->pid = p->handle.pid;
  p->box = box;
  p->stdin_state = p->has_stdin ? STDIN_OPEN : STDIN_NONE;
  p->exit_ref = ref_field(L, opts, "on_exit");
  reader *rs[2] = {&p->out, &p->err};
  const char *names[2] = {"on_stdout", "on_stderr"};
  int has[2] = {p->has_out, p->has_err};
  for (int i = 0; i < 2; i++) {
    if (!has[i]) continue;
    rs[i]->cb_ref = ref_field(L, opts, names[i]);
    if (reader_start(rs[i]) != 0) reader_close(rs[i]);
  }
  lua_pushvalue(L, -1);  /* the box */
  p->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

static proc_box *new_box(lua_State *L) {
  proc_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->p = NULL;  /* "closed" until the spawn succeeded */
  box->pid = 0;
  luaL_setmetatable(L, PROCESS_MT);
  return box;
}

/* core.spawn(opts) -> proc | nil, "FILE: message", "ENOENT" */
int process_spawn(lua_State *L) {
  spawn_opts o;
  spawn_opts_check(L, 1, &o);  /* stack: opts, anchors... */
  proc_box *box = new_box(L);
  proc *p = calloc(1, sizeof *p);
  if (p == NULL) return luaL_error(L, "spawn: out of memory");
  p->self_ref = p->exit_ref = LUA_NOREF;
  p->out.cb_ref = p->err.cb_ref = LUA_NOREF;
  link_proc(p);
  int rc = start_process(&host_get()->loop, p, &o);
  if (rc != 0) {
    abandon(p);
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", o.file, uv_strerror(rc));
    lua_pushstring(L, uv_err_name(rc));
    return 3;
  }
  attach(L, 1, box, p);
  return 1;
}

/* {=================== methods ===================} */

static proc_box *check_box(lua_State *L) {
  return luaL_checkudata(L, 1, PROCESS_MT);
}

/* The process of an open box; a closed one raises, as Lua's files do. */
static proc *check_open(lua_State *L) {
  proc *p = check_box(L)->p;
  if (p == NULL) luaL_error(L, "attempt to use a closed process");
  return p;
}

/* Lua lets go: no more callbacks; handles close once the child is done. */
static void release(proc_box *box) {
  proc *p = box->p;
  if (p == NULL) return;
  box->p = NULL;
  p->box = NULL;
  host_unref(&p->exit_ref);
  host_unref(&p->self_ref);
  if (p->has_out) reader_detach(&p->out);  /* still drained, so the child never blocks */
  if (p->has_err) reader_detach(&p->err);
  close_stdin(p);  /* nobody can write any more; queued writes still go out */
  if (p->exited) {
    if (p->has_out) reader_close(&p->out);
    if (p->has_err) reader_close(&p->err);
  }
  maybe_free(p);
}

static int proc_close(lua_State *L) {
  release(check_box(L));
  return 0;
}

/* Writes the string at index 2 to the child's stdin; NULL or the failure. */
static const char *write_stdin(lua_State *L, proc *p) {
  luaL_checktype(L, 2, LUA_TSTRING);
  if (p == NULL || p->stdin_state != STDIN_OPEN) return "stdin is closed";
  int rc = write_anchored(L, (uv_stream_t *)&p->stdin_pipe, 2, &p->pending_write,
                          p, on_written);
  return rc != 0 ? uv_strerror(rc) : NULL;
}

static int proc_write(lua_State *L) {
  const char *failure = write_stdin(L, check_open(L));
  if (failure != NULL) return luaL_error(L, "process write: %s", failure);
  return 0;
}

static int proc_close_stdin(lua_State *L) {
  close_stdin(check_open(L));
  return 0;
}

/*
** proc:expect_frame(n): the next n bytes of stdout (read in lines mode)
** are one frame, handed to on_stdout whole as (bytes, nil, true): what a
** client of a provider's raw_output calls from on_stdout when a line
** announces one (docs/protocol.md).
*/
static int proc_expect_frame(lua_State *L) {
  proc *p = check_open(L);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n > 0, 2, "a frame's size must be at least 1 byte");
  if (!p->has_out || reader_expect_frame(&p->out, (size_t)n) != 0)
    return luaL_error(L, "expect_frame: stdout is not read in lines mode, a frame is already expected, "
                      "or %I bytes pass the line limit", n);
  return 0;
}

static int proc_pending_write_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_open(L)->pending_write);
  return 1;
}

static int signal_proc(proc *p, int signo) {
  return kill(p->process_group ? -p->pid : p->pid, signo);
}

/* proc:kill([sig]) -> true | false (already exited) | nil, err, name */
static int proc_kill(lua_State *L) {
  proc *p = check_open(L);
  int signo = lua_isnoneornil(L, 2) ? SIGTERM : host_check_signal(L, 2);
  if (p->exited) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (signal_proc(p, signo) != 0 && errno != ESRCH) {
    int e = errno;
    luaL_pushfail(L);
    lua_pushfstring(L, "kill %d: %s", p->pid, strerror(e));
    lua_pushstring(L, uv_err_name(uv_translate_sys_error(e)));
    return 3;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int proc_gc(lua_State *L) {
  release(check_box(L));
  return 0;
}

static int proc_tostring(lua_State *L) {
  proc_box *box = check_box(L);
  lua_pushfstring(L, "smol.process (pid %d%s)", box->pid, box->p ? "" : ", closed");
  return 1;
}

/* __index: a method, else the pid field (only `pid` reads the box). */
static int proc_index(lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (key != NULL && strcmp(key, "pid") == 0) lua_pushinteger(L, check_box(L)->pid);
  else lua_pushnil(L);
  return 1;
}

/* {=================== for conn.c ===================} */

proc *process_of(lua_State *L, int idx) {
  return ((proc_box *)luaL_checkudata(L, idx, PROCESS_MT))->p;
}

void process_sink_stdout(proc *p, line_sink sink) {
  if (p->has_out) p->out.sink = sink;
}

int process_write_bufs(lua_State *L, proc *p, const uv_buf_t *bufs, unsigned n) {
  if (p == NULL || p->stdin_state != STDIN_OPEN) return UV_EPIPE;
  return write_bufs(L, (uv_stream_t *)&p->stdin_pipe, bufs, n, &p->pending_write, p, on_written);
}

void process_close_stdin(proc *p) {
  if (p != NULL) close_stdin(p);
}

int process_kill(proc *p, int signo) {
  if (p == NULL || p->exited) return 0;
  int rc = signal_proc(p, signo);
  return rc != 0 && errno == ESRCH ? 0 : rc;
}

int process_pid(const proc *p) { return p->pid; }

/* {=================== exit path ===================} */

/* No more Lua callbacks: the exit hooks have run, only cleanup is left. */
void process_detach_all(void) {
  for (proc *p = host_get()->procs; p != NULL; p = p->next) {
    host_unref(&p->exit_ref);
    if (p->has_out) reader_detach(&p->out);
    if (p->has_err) reader_detach(&p->err);
  }
}

int process_live_count(void) {
  int n = 0;
  for (proc *p = host_get()->procs; p != NULL; p = p->next) n += !p->exited;
  return n;
}

/*
** Signals every child still running. A group leader that exited while
** its pipes are still open has descendants holding them: signal the
** group (its id cannot be reused while the group exists).
*/
void process_signal_all(int signo) {
  for (proc *p = host_get()->procs; p != NULL; p = p->next) {
    int pipes_open = (p->has_out && !reader_finished(&p->out)) ||
                     (p->has_err && !reader_finished(&p->err));
    if (!p->exited || (p->process_group && pipes_open)) signal_proc(p, signo);
  }
}

void process_close_all(void) {
  for (proc *p = host_get()->procs; p != NULL; p = p->next) {
    abort_stdin(p);
    if (p->has_out) reader_close(&p->out);
    if (p->has_err) reader_close(&p->err);
  }
}

void process_open(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"write", proc_write}, {"close_stdin", proc_close_stdin},
    {"kill", proc_kill}, {"pending_write_bytes", proc_pending_write_bytes}, {"expect_frame", proc_expect_frame},
    {"close", proc_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
    {"__gc", proc_gc}, {"__close", proc_gc}, {"__tostring", proc_tostring},
    {NULL, NULL}};
  luaL_newmetatable(L, PROCESS_MT);
  luaL_setfuncs(L, meta, 0);
  luaL_newlib(L, methods);
  lua_pushcclosure(L, proc_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushcfunction(L, process_spawn);
  lua_setfield(L, -2, "spawn");
}
