/*
** A process started by `exec` or `spawn`: its pipes, timers, captured and
** buffered output, and the request (an exec, or a wait) its output
** streams to. The process table (every process not yet forgotten) is
** this module's own: a session's processes are found here by session.
** The backend starts the command and reports its end through
** proc_exited(); everything else about a process lives here.
**
** A proc is freed once its command has exited, both output pipes reached
** EOF (or were closed), the result was answered and it was forgotten.
*/
#ifndef SMOL_PROCESS_H
#define SMOL_PROCESS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "bytes.h"
#include "reply.h"
#include "session.h"

/* Also the most a request may ask for: both streams' base64 must fit the host's 256 MiB line cap. */
#define PROC_MAX_OUTPUT (64ull * 1024 * 1024)
/* Bytes that may wait for a process's stdin before write_stdin is refused (one more write may pass it). */
#define PROC_STDIN_QUEUE (16u * 1024 * 1024)

typedef struct outstream {
  uv_pipe_t pipe;
  const char *name;        /* "stdout" or "stderr" */
  bool open;               /* pipe handle initialised and not closed yet */
  bool eof;
  bool reading;
  bool grown;              /* pipe grown to 1 MiB (process.c grow_pipe) */
  bool resting;            /* not read for a moment, so that its writer fills it (process.c rest) */
  uint64_t streamed;       /* bytes sent to requests so far */
  bytes captured;          /* what the current exec/wait result will hold */
  bool truncated;
  ring buffered;           /* spawned process, no wait attached: kept here */
} outstream;

typedef struct proc {
  char id[24];             /* "p1", "p2", ...: the protocol's process_id */
  pid_t pid;               /* set by backend->start; also the process group id */
  void *backend_data;      /* the backend's per-process state */
  session *session;        /* NULL once forgotten (its session closed, or its result answered) */
  struct proc *next, *prev;   /* in the process table */

  bool is_exec;            /* exec (answers with its result) or spawn (buffers until wait) */
  request *req;            /* the exec or wait whose result this process owes, or NULL */
  bool started_pending;    /* an exec's `started` not sent yet (process.c hold_started) */
  bool exited;
  int wait_status;
  outstream out, err;
  int write_ends[2];       /* our copies of the stdout/stderr pipes' write ends, -1 once closed */
  uv_pipe_t in;
  bool in_open;            /* stdin pipe open for writes (spawn kept for write_stdin) */
  size_t in_pending;       /* bytes queued to stdin and not yet written */
  bool in_eof;             /* close stdin once in_pending reaches 0 */
  struct stdin_write *writes;   /* queued writes to stdin, oldest first (process.c) */
  uint64_t max_output;     /* per-stream cap of the captured copy */
  bool raw_output;         /* output events go as frames (send_event_frame), not base64 */
  uv_timer_t wall_timer, idle_timer, grace_timer, wait_timer;
  uint64_t idle_ms, grace_ms;
  const char *timed_out;   /* NULL, "wall" or "idle" */
  unsigned handles_open;   /* uv handles whose close callback has not run yet */
} proc;

/* What a process is started with (read from the request by process_methods.c). */
typedef struct proc_options {
  char **argv;
  char **envp;
  char cwd[PATH_MAX];      /* as commands see it */
  char *stdin_data;        /* taken over by proc_start */
  size_t stdin_len;
  bool has_stdin;          /* stdin_base64 was given (maybe empty): stdin ends after it */
  uint64_t timeout_ms, idle_timeout_ms, grace_ms, max_output;
  bool raw_output;
} proc_options;

/*
** Starts the command of o in session s: an exec (its output streams to
** the request given to proc_exec) or a spawn (its output is buffered
** until a wait). NULL with -errno in *err when no process could be made.
*/
proc *proc_start(session *s, bool is_exec, proc_options *o, int *err);

/* The exec's request r: its `started` goes out with what follows (or after 5 ms), then output, exit, result. */
void proc_exec(proc *p, request *r);

/* Answers spawn's r: `started`, then {process_id}. */
void proc_spawned(proc *p, request *r);

/* The session's process named id, or NULL. */
proc *procs_find(const session *s, const char *id);

/* Attaches wait r: buffered output first, then what follows; after timeout_ms (UINT64_MAX: none) {running: true}. */
void proc_wait(proc *p, request *r, uint64_t timeout_ms);

/* Sends signo to the process's group. 0 or -errno. */
int proc_signal(proc *p, int signo);

/*
** Queues data (taken over) to stdin, closing it after when eof; r is
** answered once written, or at once with limit_exceeded while
** PROC_STDIN_QUEUE bytes or more already wait.
*/
void proc_write_stdin(proc *p, char *data, size_t len, bool eof, request *r);

/* Whether the process's stdin still takes writes. */
bool proc_stdin_open(const proc *p);

/* Called by a backend when a command it started has ended (waitpid-style status). */
void proc_exited(proc *p, int wait_status);

/* While paused, output that streams to a request is not read (the wire's congestion hook). */
void procs_set_paused(bool on);

/* Whether any process of s still runs; sends signo to each that does. */
bool procs_running(const session *s);
void procs_signal_running(session *s, int signo);

/* Session close: kill every process of s, answer their requests with errors, forget them. */
void procs_close_session(session *s);

/* Frees the table (at exit, once every process is forgotten and the loop has ended). */
void procs_free(void);

#endif
