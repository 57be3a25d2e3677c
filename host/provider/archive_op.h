/*
** One archive in flight (see archive_methods.h): its id, its session,
** its worker thread, the chunk queue between the worker and the loop,
** and what the worker reports. archive_write.c and archive_read.c embed
** it first in their own state and give it a kind (what runs on the
** worker, what the loop does when the worker signals, how to answer
** everything still owed when the archive is ended from outside).
**
** Threads: the worker runs kind->work and touches only the queue, the
** fields its kind gives it before starting, and (through the calls
** below, under `lock`) its report. Everything else is the loop's.
*/
#ifndef SMOL_ARCHIVE_OP_H
#define SMOL_ARCHIVE_OP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "chunk_queue.h"
#include "failure.h"
#include "reply.h"
#include "session.h"

/* The most archives one provider has in flight (each has a thread). */
#define ARCHIVES_MAX 64

/* What the worker ended with. */
typedef struct op_result {
  bool ok;
  failure fail;
  uint64_t entries, bytes;
} op_result;

typedef struct archive_op archive_op;

typedef struct archive_op_kind {
  const char *method;                                  /* "write_archive" or "read_archive" */
  void (*work)(archive_op *x, op_result *res);         /* on the worker thread */
  void (*woken)(archive_op *x);                        /* on the loop: the worker reported something (may end x) */
  void (*answer_all)(archive_op *x, const char *code, const char *message);   /* every request still owed */
  void (*release)(archive_op *x);                      /* frees the kind's own state (the worker is gone) */
} archive_op_kind;

struct archive_op {
  char id[24];                 /* "a1", "a2", ...: the protocol's archive_id */
  const archive_op_kind *kind;
  session *session;
  archive_op *next;            /* in the table of archives in flight */
  uv_async_t wake;             /* the worker's signal to the loop */
  uv_thread_t thread;
  bool running;                /* the thread was started and not joined yet */
  chunk_queue queue;
  uv_mutex_t lock;             /* guards the report below */
  uint64_t taken;              /* chunks the worker has taken from the queue */
  bool done;                   /* the worker has finished: result holds how */
  op_result result;
};

/* A new archive of kind in s (size: the kind's whole state), in the table; NULL with f filled at the limit. */
archive_op *archive_op_new(size_t size, const archive_op_kind *kind, session *s, size_t queue_cap, failure *f);

/* Starts the worker. False with f filled (then end x with archive_op_free). */
bool archive_op_start(archive_op *x, failure *f);

/* On the worker: one more chunk taken; wakes the loop. */
void archive_op_note_taken(archive_op *x);

/* On the worker: wakes the loop. */
void archive_op_wake(archive_op *x);

/* On the loop: chunks taken so far; whether the worker is done (then *res gets its result and the thread is joined). */
uint64_t archive_op_taken(archive_op *x);
bool archive_op_finished(archive_op *x, op_result *res);

/* Out of the table, the worker stopped and joined, the kind's state released, x freed once its handle closes. */
void archive_op_free(archive_op *x);

/* The archive of s named id, of kind (NULL: any), or NULL. */
archive_op *archive_op_find(const session *s, const char *id, const archive_op_kind *kind);

/* Whether the wire is congested (archives_set_paused). */
bool archives_paused(void);

#endif
