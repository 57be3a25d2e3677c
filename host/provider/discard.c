/*
** Removing session directories on jobs (see discard.h).
*/
#define _GNU_SOURCE
#include "discard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "errcodes.h"
#include "fd_reserve.h"
#include "job.h"
#include "root.h"
#include "tree.h"

typedef struct discard {
  int root_fd;              /* the provider root's own: it stays open until every discard has ended */
  char *name;               /* the session's directory in it, or NULL when there is none */
  int rc;                   /* tree_remove's result */
  request *r;               /* answered once removed (with f, or {}), or NULL */
  failure f;
  bool failed;
  request *also;            /* answered {} once removed, or NULL */
  void (*close_wait)(void *data), (*close_done)(void *data);   /* the session's (session.h) */
  void *close_data;
  job *job;
  struct discard *next;
} discard;

/* The removals in progress (the context's part). */
typedef struct discards {
  discard *first;
} discards;

static discards *table(void) {
  return CTX_PART(discards);
}

/* On the job's thread: removal is never cut short, so it ignores the cancel flag. */
static void remove_work(job *j) {
  discard *d = j->data;
  if (d->close_wait) d->close_wait(d->close_data);   /* the sandbox ends before its files go */
  d->rc = d->name ? tree_remove(d->root_fd, d->name) : 0;
}

static void unlink_discard(discard *d) {
  for (discard **pp = &table()->first; *pp; pp = &(*pp)->next)
    if (*pp == d) { *pp = d->next; return; }
}

/* Answers a close: {}, or what kept the session's directory from going. */
static void answer_close(request *r, const failure *left) {
  if (left) reply_failure(r, left);
  else reply_result(r, cJSON_CreateObject());
}

static void removed(job *j) {
  discard *d = j->data;
  unlink_discard(d);
  if (d->close_done) d->close_done(d->close_data);
  failure left;
  if (d->rc < 0) {   /* the root goes when the provider stops, and with it what is left here */
    const char *code = strcmp(errno_code(-d->rc), "limit_exceeded") == 0 ? "limit_exceeded" : "io_error";
    fail(&left, code, "close: session `%s` is closed, but its directory %s/%s could not be removed: %s",
         d->name, root_path(), d->name, strerror(-d->rc));
    fprintf(stderr, "smolwf-provider: %s\n", left.message);
  }
  if (d->r && d->failed) reply_failure(d->r, &d->f);   /* a failed open: its own failure says more */
  else if (d->r) answer_close(d->r, d->rc < 0 ? &left : NULL);
  if (d->also) answer_close(d->also, d->rc < 0 ? &left : NULL);
  free(d->name);
  free(d);
}

/* A discard taking over what s's backend left to wait for (session_free then leaves it to us). */
static discard *discard_new(session *s) {
  discard *d = calloc(1, sizeof *d);
  if (!d) abort();
  d->close_wait = s->close_wait;
  d->close_done = s->close_done;
  d->close_data = s->close_data;
  s->close_wait = NULL;   /* all three: a later close must not end the same sandbox again */
  s->close_done = NULL;
  s->close_data = NULL;
  return d;
}

/* Runs d's wait and removal on a job (here and now when no thread can be had). */
static void discard_start(discard *d) {
  if (d->name || d->close_wait) d->job = job_start(provider_ctx()->loop, remove_work, removed, d);
  if (!d->job) {   /* no thread to be had (or nothing to do): here and now */
    remove_work(&(job){.data = d});
    removed(&(job){.data = d});
    return;
  }
  d->next = table()->first;
  table()->first = d;
}

void session_discard(session *s, request *r, const failure *f, request *also) {
  discard *d = discard_new(s);
  d->r = r;
  d->also = also;
  if (f) { d->f = *f; d->failed = true; }
  /* no copy of the root's fd: one more descriptor is just what a provider out of them lacks */
  d->root_fd = root_fd();
  if (s->root) d->name = strdup(s->id);
  free(s->root);   /* the files are ours to remove too */
  s->root = NULL;
  session_free(s);
  fd_reserve_restore();   /* a reserve spent on clean-up is held again from what the session gave back */
  discard_start(d);
}

void session_discard_sandbox(session *s) {
  discard_start(discard_new(s));
}

void session_hold(session *s) {
  s->held_by++;
}

void session_release(session *s) {
  if (--s->held_by == 0 && s->close_req) session_discard(s, s->close_req, NULL, NULL);
}

bool session_hold_close(session *s, request *r) {
  if (s->held_by == 0) return false;
  s->close_req = r;
  return true;
}

void discards_finish(void) {
  while (table()->first) job_finish_now(table()->first->job);
  free(provider_ctx()->discards);
  provider_ctx()->discards = NULL;
}
