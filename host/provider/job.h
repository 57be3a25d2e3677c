/*
** Work that takes as long as its input (copying a workspace, removing a
** session's tree): run on a thread of its own, so the loop keeps serving
** every other session meanwhile. A job reports back on the loop, once,
** through its `done` callback; until then the loop stays alive for it.
**
** Cancelling only sets a flag: the work checks it between files (and
** between chunks of a large one) and returns early. Progress is two
** counters the work bumps and the loop reads; both are atomics, the only
** thing the two threads share besides what the job's owner hands over
** before the start and takes back in `done`.
*/
#ifndef SMOL_JOB_H
#define SMOL_JOB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct job job;

/* Runs on the job's thread; must not touch the loop or anything the loop owns. */
typedef void (*job_work_fn)(job *j);

/* Runs on the loop once the work returned; the job is freed right after it. */
typedef void (*job_done_fn)(job *j);

struct job {
  void *data;                    /* the owner's, handed to both callbacks */
  atomic_bool cancelled;
  atomic_uint_fast64_t files, bytes;   /* progress, as the work counts it */
  job_work_fn work;
  job_done_fn done;
  uv_thread_t thread;
  uv_async_t finished;           /* the work's thread wakes the loop through it */
};

/* Starts work on a new thread. NULL (with nothing started) when no thread can be made. */
job *job_start(uv_loop_t *loop, job_work_fn work, job_done_fn done, void *data);

/* Asks the work to stop at its next check; `done` still runs, once. */
void job_cancel(job *j);

/* For the work: has the owner given up on it? */
bool job_cancelled(job *j);

/*
** Cancels j and waits, on the loop, until its work returned; then runs
** its `done` at once. For stopping the provider, when nothing else is
** left to serve.
*/
void job_finish_now(job *j);

#endif
