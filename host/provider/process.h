/*
** Processes started by `exec` and `spawn`: their pipes, timers, captured
** and buffered output, and the request (an exec, or a wait) that their
** output streams to. The backend starts the command and reports its end
** through proc_exited(); everything else about a process lives here.
**
** A proc is freed once its command has exited, both output pipes reached
** EOF (or were closed), the result was answered and the session forgot it.
*/
#ifndef SMOL_PROCESS_H
#define SMOL_PROCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct session;
struct request;

/* Output of a spawned process kept until a `wait` takes it: a ring that drops its oldest bytes. */
typedef struct ring {
  char *data;
  size_t cap, head, len;
  uint64_t dropped;        /* bytes dropped since the last wait took the buffer */
} ring;

/* A growable byte buffer: an exec's (or a wait's) captured output. */
typedef struct bytes {
  char *data;
  size_t len, cap;
} bytes;

typedef struct outstream {
  uv_pipe_t pipe;
  const char *name;        /* "stdout" or "stderr" */
  bool open;               /* pipe handle initialised and not closed yet */
  bool eof;
  bool reading;
  bool grown;              /* pipe grown to 1 MiB (process.c grow_pipe) */
  bytes captured;          /* what the current exec/wait result will hold */
  bool truncated;
  ring buffered;           /* spawned process, no wait attached: kept here */
} outstream;

typedef struct proc {
  char id[24];             /* "p1", "p2", ...: the protocol's process_id */
  pid_t pid;               /* set by backend->start; also the process group id */
  void *backend_data;      /* the backend's per-process state */
  struct session *session; /* NULL once the session was closed under it */
  struct proc *next;       /* in session->procs */

  bool is_exec;            /* exec (answers with its result) or spawn (buffers until wait) */
  struct request *req;     /* the exec or wait whose result this process owes, or NULL */
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
  uv_timer_t wall_timer, idle_timer, grace_timer, wait_timer;
  unsigned timers_open;    /* timer handles not yet closed */
  uint64_t idle_ms, grace_ms;
  const char *timed_out;   /* NULL, "wall" or "idle" */
  unsigned handles_open;   /* uv handles whose close callback has not run yet */
} proc;

/* Every open process (running or not yet forgotten), for output pausing. */
void procs_pause_output(void);
void procs_resume_output(void);

/* Session close: kill every process group of s, answer their requests with errors, forget them. */
void procs_close_session(struct session *s);

#include "signames.h"   /* signal_from_name / signal_to_name: "TERM" <-> SIGTERM */

#endif
