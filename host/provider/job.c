/*
** Jobs on threads of their own (see job.h).
*/
#define _GNU_SOURCE
#include "job.h"

#include <signal.h>
#include <stdlib.h>

static void free_job(uv_handle_t *h) {
  free(h->data);
}

/* Joins the finished thread, runs `done` and lets the handle go. */
static void finish(job *j) {
  uv_thread_join(&j->thread);
  j->done(j);
  uv_close((uv_handle_t *)&j->finished, free_job);
}

static void on_finished(uv_async_t *h) {
  finish(h->data);
}

/*
** The thread takes no signal: they are the loop's (uv_signal), and a
** signal landing here would only interrupt a copy's system calls.
*/
static void run(void *arg) {
  job *j = arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  j->work(j);
  uv_async_send(&j->finished);
}

job *job_start(uv_loop_t *loop, job_work_fn work, job_done_fn done, void *data) {
  job *j = calloc(1, sizeof *j);
  if (!j) abort();
  j->data = data;
  j->work = work;
  j->done = done;
  atomic_init(&j->cancelled, false);
  atomic_init(&j->files, 0);
  atomic_init(&j->bytes, 0);
  uv_async_init(loop, &j->finished, on_finished);
  j->finished.data = j;
  if (uv_thread_create(&j->thread, run, j) != 0) {
    uv_close((uv_handle_t *)&j->finished, free_job);
    return NULL;
  }
  return j;
}

void job_cancel(job *j) {
  atomic_store(&j->cancelled, true);
}

bool job_cancelled(job *j) {
  return atomic_load_explicit(&j->cancelled, memory_order_relaxed);
}

void job_finish_now(job *j) {
  job_cancel(j);
  /* After uv_close the pending wake-up is dropped: `done` runs here, once. */
  finish(j);
}
