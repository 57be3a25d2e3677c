/*
** The smolwf host's internal header: the one host state (one libuv loop,
** one main Lua state) and the entry points each file offers the others.
** Files are named after the concept they hold: callback.c (protected calls
** into Lua), sigint.c (Ctrl-C), timer.c, process.c, reader.c (pipe reading),
** stdio.c (the host's own stdin/stdout for Lua providers), tty.c
** (terminal questions), b64.c, conn.c (a provider connection: its wire,
** behind conn.h), json_lua.c (cJSON values as Lua values), command.c
** (exec/spawn params), write.c, capture.c, fs.c, os.c (system calls Lua
** lacks), hash.c (SHA-256 for the step cache),
** core.c (the smol.core module table), introspect.c (what the host holds,
** for test harnesses), exitpath.c (orderly shutdown),
** luapath.c (package.path), cli.c and main.c (the command line).
*/
#ifndef SMOLWF_HOST_H
#define SMOLWF_HOST_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include <lua.h>
#include <uv.h>

#include "json_arena.h"
#include "linebuf.h"
#include "signames.h"

typedef struct smol_host smol_host;

/* callback.c: every loop->Lua entry, on the main state */
int host_msghandler(lua_State *L);
int host_pcall(int nargs);            /* function + nargs args on the main state's top */
void host_report(const char *what, lua_State *L, int idx);
void host_push_interrupt_error(lua_State *L);
int host_is_interrupt_error(lua_State *L, int idx);
void host_unref(int *ref);            /* luaL_unref on the main state, then LUA_NOREF */

/* sigint.c */
int sigint_install(smol_host *h);
void sigint_disarm(smol_host *h);     /* the exit path took over: no more raising */
void sigint_close(smol_host *h);
void sigint_open(lua_State *L);       /* core.resume: resumes a task, watched for Ctrl-C */

/* signames.h (host/common): "TERM" <-> SIGTERM, 0 / NULL when unknown */

/* json_lua.c: pushes item as a Lua value; 0 (nothing pushed) past max_depth */
struct cJSON;
int json_push(lua_State *L, const struct cJSON *item, int max_depth, int depth);

/*
** reader.c: reading a pipe in "lines" or "chunks" mode into a Lua callback,
** or into a C sink: fn(ctx, line, len, NULL) per line, then fn(ctx, NULL,
** 0, err) once at the end (err NULL at EOF).
*/
typedef struct line_sink {
  /* Returns how many bytes after this line are a frame's payload (0: lines go on). */
  size_t (*fn)(void *ctx, char *data, size_t n, const char *err);   /* data: the sink may change it */
  void *ctx;
  void (*frame)(void *ctx, char *data, size_t n);   /* a frame's payload, whole */
} line_sink;
typedef struct reader reader;
typedef void (*reader_done_fn)(reader *r, void *owner);
struct reader {
  union { uv_pipe_t pipe; uv_tty_t tty; uv_stream_t stream; uv_handle_t handle; } h;
  int lines;            /* 1: lines mode (linebuf), 0: chunks */
  size_t max_line;
  int cb_ref;           /* the Lua callback; LUA_NOREF once detached */
  int state;            /* READER_* in reader.c */
  void *owner;
  reader_done_fn on_done;   /* after EOF/error was delivered */
  reader_done_fn on_closed; /* from the pipe's close callback */
  linebuf lb;
  line_sink sink;           /* instead of the Lua callback when set */
  struct { char *buf; size_t need, have; } frame;   /* a frame's payload cut by a read */
};
int reader_init(reader *r, uv_loop_t *loop, int lines, size_t max_line,
                void *owner, reader_done_fn on_done, reader_done_fn on_closed);
int reader_init_fd(reader *r, uv_loop_t *loop, int fd, int lines, size_t max_line,
                   void *owner, reader_done_fn on_done, reader_done_fn on_closed);
int reader_start(reader *r);
void reader_detach(reader *r);        /* drops the callback or sink; keeps draining */
void reader_close(reader *r);         /* idempotent; on_closed follows */
void reader_end(reader *r);           /* ends reading now, as at EOF (a partial line is dropped) */
int reader_finished(const reader *r);  /* EOF/error delivered, or closed */
/* The next n bytes (lines mode, n <= max_line) are a frame: to the Lua callback whole, as (bytes, nil, true). 0, or -1 when not. */
int reader_expect_frame(reader *r, size_t n);
/* How the error at the end begins when the output ended inside a frame. */
#define READER_FRAME_CUT "an output frame cut short"

/* stdio.c's stdout: a uv stream on a dup of fd 1, or synchronous writes */
typedef struct host_stdout {
  int state;
  union { uv_pipe_t pipe; uv_tty_t tty; uv_stream_t stream; uv_handle_t handle; } h;
  size_t pending;
  int error;  /* the write error that broke it */
} host_stdout;

struct smol_host {
  uv_loop_t loop;
  lua_State *L;                      /* main state: every callback into Lua runs here */
  int loop_running;                  /* inside uv_run: a nested run is refused */
  int failed;                        /* a callback or task failed: exit non-zero */
  volatile sig_atomic_t interrupted; /* Ctrl-C seen and not yet taken over by the exit path */
  volatile sig_atomic_t was_interrupted; /* the signal (INT, TERM, HUP) seen: exit status 128+it */
  int exiting;                       /* the exit path has started */
  const char *progname;
  /* What each file keeps for the whole run hangs off the host, not off
  ** globals of its own (as luv hangs its state off its ctx). */
  struct proc *procs;                /* process.c: every process not yet freed */
  struct timer *timers;              /* timer.c: every timer not yet closed */
  reader stdin_reader;               /* stdio.c: our stdin, for Lua providers */
  int stdin_busy;                    /*   from read_stdin until its handle closed */
  unsigned stdin_generation;         /*   which reader box owns stdin_reader */
  host_stdout out;                   /* stdio.c: our stdout */
  char exe_path[PATH_MAX], exe_dir[PATH_MAX]; /* fs.c: where this smolwf is */
  uv_async_t wake_loop;              /* sigint.c: the handler wakes the loop */
  volatile sig_atomic_t hook_allowed, wake_allowed;
  lua_State *volatile running_task;  /*   the task coroutine running now, or NULL */
  volatile sig_atomic_t catching, forced; /* core.catch_interrupt runs; a second signal came first */
  int deadline_passed;               /* exitpath.c: the drain's deadline */
  struct { char *buf; size_t len, cap; } params;     /* command.c: params being built */
  struct { unsigned char *buf; size_t cap; } b64;    /* b64.c: decoding scratch */
  json_arena json_arena;              /* all of cJSON's memory (json_arena.h): each call that parses or builds resets it first */
  char read_buffer[1024 * 1024];     /* reader.c: every read (see there) */
  char write_joined[16 * 1024];      /* write.c: a small line joined for one write */
};

/* The one host of this process (callback.c); inline: hot paths reach it per line. */
extern smol_host smolwf_host;
static inline smol_host *host_get(void) { return &smolwf_host; }


/*
** write.c: writes the Lua string at idx; what the pipe does not take at
** once is queued, anchored until written, counted in *pending, and then
** reported by done(owner, status) (only for such a queued part).
*/
typedef void (*write_done_fn)(void *owner, int status);
int write_anchored(lua_State *L, uv_stream_t *stream, int idx, size_t *pending,
                   void *owner, write_done_fn done);  /* 0 or a UV_E* code */
int write_bufs(lua_State *L, uv_stream_t *stream, const uv_buf_t *bufs, unsigned n, size_t *pending,
               void *owner, write_done_fn done);           /* as one write */

/* spawn_opts.c: checking core.spawn's options table (misuse raises) */
enum { STREAM_IGNORE, STREAM_INHERIT, STREAM_LINES, STREAM_CHUNKS };
typedef struct spawn_opts {
  const char *file, *cwd;
  char **args, **env;   /* NULL-terminated; memory owned by Lua values on the stack */
  int stdin_pipe, out_mode, err_mode, process_group;
  size_t max_line;
  double drain;         /* seconds the output may stay open after the exit (< 0: no limit) */
} spawn_opts;
void spawn_opts_check(lua_State *L, int idx, spawn_opts *o); /* pushes anchors */

/* each file adds its functions to the smol.core table on the stack top */
void timer_open(lua_State *L);
void process_open(lua_State *L);
/* process.c, for conn.c: a spawned process seen from C */
typedef struct proc proc;
int process_spawn(lua_State *L);      /* core.spawn: pushes the box, or fail, msg, errname */
proc *process_of(lua_State *L, int idx); /* the box's process; NULL once closed */
void process_sink_stdout(proc *p, line_sink sink);
int process_write_bufs(lua_State *L, proc *p, const uv_buf_t *bufs, unsigned n); /* 0 or a UV_E* code */
void process_close_stdin(proc *p);
int process_kill(proc *p, int signo);  /* 0, or -1 with errno; exited: 0 */
int process_pid(const proc *p);
/* class.c: registers a userdata class's metatable (meta: metamethods, methods: its __index) */
struct luaL_Reg;
void host_class(lua_State *L, const char *name, const struct luaL_Reg *methods,
                const struct luaL_Reg *meta);
void b64_open(lua_State *L);
void capture_open(lua_State *L);        /* capture.c: core.capture, exec's kept output */
typedef struct capture capture;
capture *capture_push(lua_State *L, size_t limit);  /* a new core.capture on the stack */
int capture_add(capture *c, const char *bytes, size_t n); /* 0: out of memory */
int capture_push_taken(lua_State *L, int idx); /* pushes the bytes of the capture at idx, empties it; 1: truncated */
int b64_push(lua_State *L, const char *src, size_t n); /* b64.c: pushes the bytes; 0 (nothing) if invalid */
int b64_push_or_why(lua_State *L, const char *src, size_t n); /* the bytes and 1, or why not and 0 */
int b64_decode_in_place(char *s, size_t n, size_t *out);       /* 0, or -1 (s untouched) */
/* Keeps only the stack top above base: it moves to base + 1, what was between goes. */
static inline void host_keep_top(lua_State *L, int base) {
  if (lua_gettop(L) > base + 1) {
    lua_replace(L, base + 1);
    lua_settop(L, base + 1);
  }
}
/* exec_result.c: a process request's result (exec, wait) from its result object */
enum { EXEC_PLAIN, EXEC_EVENTS, EXEC_COPY, EXEC_NONE };   /* how output is kept */
typedef struct exec_kept {
  int mode;                /* EXEC_EVENTS, EXEC_COPY or EXEC_NONE */
  size_t limit;            /* EXEC_COPY: the bytes of each stream to keep */
  int argv, pid, out, err; /* stack indexes of what was kept (0: none) */
} exec_kept;
/* A result object's fields that matter, as stack indexes (0: absent); object: it is one. */
typedef struct exec_fields {
  int object, exit_code, signal, timed_out, running, out_b64, err_b64, out_trunc, err_trunc;
} exec_fields;
void exec_fields_from_table(lua_State *L, int body, exec_fields *f);          /* pushes the values */
void exec_fields_from_json(lua_State *L, const struct cJSON *body, exec_fields *f); /* pushes the values */
int exec_result_push(lua_State *L, const exec_fields *f, const exec_kept *k); /* 1, or 0 with a message */
void command_open(lua_State *L);        /* command.c: core.process_params */
void fs_open(lua_State *L);
void os_open(lua_State *L);            /* os.c: core.chmod, kill, getpid, raise, error_code, hostname */
int host_check_signal(lua_State *L, int idx); /* a signal name or number argument (misuse raises) */
void loop_open(lua_State *L);
void stdio_open(lua_State *L);
void tty_open(lua_State *L);            /* tty.c: core.isatty, core.term_width */
void hash_open(lua_State *L);           /* hash.c: core.sha256, sha256_file, hash_files (OpenSSL) */
void json_check_open(lua_State *L);       /* json_check.c: core.json_problem */
void introspect_open(lua_State *L);     /* introspect.c: core.handles, core.registry_refs */
int luaopen_smol_core(lua_State *L);

/* traceback.c: tracebacks of the user's frames (SMOLWF_TRACE=1: all of them) */
void traceback_set_engine_dir(const char *lua_dir);
void host_traceback(lua_State *L, lua_State *L1, const char *msg, int level); /* pushes it */
void traceback_open(lua_State *L);     /* core.traceback */
void clean_text_open(lua_State *L);    /* clean_text.c: core.valid_utf8, core.clean_text */

/* shutdown hooks used by exitpath.c */
void timer_close_all(void);
void process_detach_all(void);
int process_live_count(void);          /* not yet exited */
void process_signal_all(int signo);
void process_close_all(void);
void stdio_stop_reading(void);
void stdio_close_all(void);
int stdio_out_pending(void);           /* 1 while writes to our stdout are queued */

/* exitpath.c */
int exitpath_run(lua_State *L, int status, int drain); /* steps 1-3; returns the exit status */
void exitpath_finish(void);                 /* lua_close + uv_loop_close */
void exitpath_replace_os_exit(lua_State *L);

/* luapath.c: package.path (lua/ next to us, SMOLWF_PATH, --path, ./, defaults) */
void luapath_setup(lua_State *L, const char *const *extra, int nextra);

/* fs.c */
int fs_init_exe_path(void);           /* once at start; 0 or a UV_E* code */
const char *fs_exe_path(void);        /* absolute path of this smolwf */
const char *fs_exe_dir(void);
int fs_is_dir(const char *path);

/* cli.c: the command line, as lua.c reads it (plus --path and commands) */
typedef struct cli {
  int script;           /* argv index of the script (or command), 0 when none */
  int is_command;       /* argv[script] names a command (smolwf run ...) */
  int has_e, version, help;
  const char **paths;   /* --path dirs */
  int npaths;
  const char *error;    /* a usage error */
} cli;
void cli_parse(int argc, char **argv, cli *c, const char **paths_storage);
void cli_usage(FILE *to);
int cli_looks_like_command(const char *word);
void cli_report_error(const cli *c, char **argv);   /* a usage error, with a "did you mean" */
void cli_unknown_command(const char *word);
int cli_script_status(lua_State *L, const char *file); /* pops the result; the exit status it asks for */

#endif
