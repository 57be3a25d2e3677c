/*
** The smolwf host's internal header: the one host state (one libuv loop,
** one main Lua state) and the entry points each file offers the others.
** Files are named after the concept they hold: callback.c (protected calls
** into Lua), sigint.c (Ctrl-C), timer.c, process.c, reader.c (pipe reading),
** stdio.c (the host's own stdin/stdout for Lua providers), tty.c
** (terminal questions), b64.c, message.c (decoding protocol lines), command.c
** (exec/spawn params), router.c
** (routing replies to their requests), fs.c,
** core.c (the smol.core module table), introspect.c (what the host holds,
** for test harnesses), exitpath.c (orderly shutdown),
** luapath.c (package.path), cli.c and main.c (the command line).
*/
#ifndef SMOLWF_HOST_H
#define SMOLWF_HOST_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include <lua.h>
#include <uv.h>

#include "linebuf.h"
#include "signames.h"

typedef struct smol_host {
  uv_loop_t loop;
  lua_State *L;                      /* main state: every callback into Lua runs here */
  int loop_running;                  /* inside uv_run: a nested run is refused */
  int failed;                        /* a callback or task failed: exit non-zero */
  volatile sig_atomic_t interrupted; /* Ctrl-C seen and not yet taken over by the exit path */
  volatile sig_atomic_t was_interrupted; /* the signal (INT, TERM, HUP) seen: exit status 128+it */
  int exiting;                       /* the exit path has started */
  const char *progname;
} smol_host;

smol_host *host_get(void);

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

/* router.c: reply lines straight to their request's queue (see there) */
typedef struct reply_router {
  int on, pending_ref, notify_ref, max_depth;
  size_t max_line;
} reply_router;
int router_take(const reply_router *rt, lua_State *L, const char *line, size_t len); /* 1: routed */
void router_on(lua_State *L, reply_router *rt, int idx); /* args at idx..idx+3 */
void router_off(reply_router *rt);

/* json_arena.c: cJSON's memory (a bump arena each C call resets first) */
void json_arena_install(void);
void json_arena_reset(void);

/* message.c: pushes id, kind, body of a protocol line (3), or fail, why (2) */
int message_push(lua_State *L, const char *line, size_t len, int max_depth);

/* reader.c: reading a pipe in "lines" or "chunks" mode into a Lua callback */
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
  reply_router router;      /* lines mode: replies routed in C while on */
};
int reader_init(reader *r, uv_loop_t *loop, int lines, size_t max_line,
                void *owner, reader_done_fn on_done, reader_done_fn on_closed);
int reader_init_fd(reader *r, uv_loop_t *loop, int fd, int lines, size_t max_line,
                   void *owner, reader_done_fn on_done, reader_done_fn on_closed);
int reader_start(reader *r);
void reader_detach(reader *r);        /* drops the Lua callback; keeps draining */
void reader_close(reader *r);         /* idempotent; on_closed follows */
int reader_finished(const reader *r);  /* EOF/error delivered, or closed */

/*
** write.c: writes the Lua string at idx; what the pipe does not take at
** once is queued, anchored until written, counted in *pending, and then
** reported by done(owner, status) (only for such a queued part).
*/
typedef void (*write_done_fn)(void *owner, int status);
int write_anchored(lua_State *L, uv_stream_t *stream, int idx, size_t *pending,
                   void *owner, write_done_fn done);  /* 0 or a UV_E* code */
int write_pieces(lua_State *L, uv_stream_t *stream, int first, int last, size_t *pending,
                 void *owner, write_done_fn done);    /* strings/integers as one write */

/* spawn_opts.c: checking core.spawn's options table (misuse raises) */
enum { STREAM_IGNORE, STREAM_INHERIT, STREAM_LINES, STREAM_CHUNKS };
typedef struct spawn_opts {
  const char *file, *cwd;
  char **args, **env;   /* NULL-terminated; memory owned by Lua values on the stack */
  int stdin_pipe, out_mode, err_mode, process_group;
  size_t max_line;
} spawn_opts;
void spawn_opts_check(lua_State *L, int idx, spawn_opts *o); /* pushes anchors */

/* each file adds its functions to the smol.core table on the stack top */
void timer_open(lua_State *L);
void process_open(lua_State *L);
/* class.c: registers a userdata class's metatable (meta: metamethods, methods: its __index) */
struct luaL_Reg;
void host_class(lua_State *L, const char *name, const struct luaL_Reg *methods,
                const struct luaL_Reg *meta);
void b64_open(lua_State *L);
void capture_open(lua_State *L);        /* capture.c: core.capture, exec's kept output */
void message_open(lua_State *L);        /* message.c: core.decode_message */
void command_open(lua_State *L);        /* command.c: core.process_params */
void fs_open(lua_State *L);
void loop_open(lua_State *L);
void stdio_open(lua_State *L);
void tty_open(lua_State *L);            /* tty.c: core.isatty, core.term_width */
void introspect_open(lua_State *L);     /* introspect.c: core.handles, core.registry_refs */
int luaopen_smol_core(lua_State *L);

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

#endif
