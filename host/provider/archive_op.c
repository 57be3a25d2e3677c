/*
** Archives in flight (see archive_op.h) and what the extension does with
** all of them at once: abort_archive, ending a closing session's, pausing
** while the wire is congested.
*/
#include "archive_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive_methods.h"
#include "context.h"
#include "params.h"

/* The archives in flight (the context's part). */
typedef struct archive_table {
  archive_op *first;
  size_t count;
  unsigned long next_id;
  bool paused;
} archive_table;

static archive_table *table(void) {
  return CTX_PART(archives);
}

static void on_wake(uv_async_t *h) {
  archive_op *x = h->data;
  x->kind->woken(x);
}

archive_op *archive_op_new(size_t size, const archive_op_kind *kind, session *s, size_t queue_cap, failure *f) {
  archive_table *t = table();
  if (t->count >= ARCHIVES_MAX) {
    fail(f, "limit_exceeded", "%s: %d archives are in flight already; finish one first", kind->method, ARCHIVES_MAX);
    return NULL;
  }
  archive_op *x = ctx_alloc(size);
  snprintf(x->id, sizeof x->id, "a%lu", ++t->next_id);
  x->kind = kind;
  x->session = s;
  chunk_queue_init(&x->queue, queue_cap);
  uv_mutex_init(&x->lock);
  uv_async_init(provider_ctx()->loop, &x->wake, on_wake);
  x->wake.data = x;
  x->next = t->first;
  t->first = x;
  t->count++;
  return x;
}

static void thread_main(void *arg) {
  archive_op *x = arg;
  op_result res = {.ok = false};
  x->kind->work(x, &res);
  uv_mutex_lock(&x->lock);
  x->result = res;
  x->done = true;
  uv_mutex_unlock(&x->lock);
  uv_async_send(&x->wake);
}

bool archive_op_start(archive_op *x, failure *f) {
  int rc = uv_thread_create(&x->thread, thread_main, x);
  if (rc < 0) return fail(f, "limit_exceeded", "%s: cannot start a thread: %s", x->kind->method, uv_strerror(rc));
  x->running = true;
  return true;
}

void archive_op_note_taken(archive_op *x) {
  uv_mutex_lock(&x->lock);
  x->taken++;
  uv_mutex_unlock(&x->lock);
  uv_async_send(&x->wake);
}

void archive_op_wake(archive_op *x) {
  uv_async_send(&x->wake);
}

uint64_t archive_op_taken(archive_op *x) {
  uv_mutex_lock(&x->lock);
  uint64_t n = x->taken;
  uv_mutex_unlock(&x->lock);
  return n;
}

/*
** Waits for the worker to return: it has reported done, or it was aborted
** and stops at its next chunk. On the loop, so bounded by one chunk's work
** (at most 16 MiB written or 1 MiB packed, through non-blocking opens):
** never by the archive's size, nor by another process.
*/
static void join(archive_op *x) {
  if (!x->running) return;
  uv_thread_join(&x->thread);
  x->running = false;
}

bool archive_op_finished(archive_op *x, op_result *res) {
  uv_mutex_lock(&x->lock);
  bool done = x->done;
  if (done) *res = x->result;
  uv_mutex_unlock(&x->lock);
  if (done) join(x);
  return done;
}

static void free_op(uv_handle_t *h) {
  free(h->data);
}

void archive_op_free(archive_op *x) {
  archive_table *t = table();
  for (archive_op **pp = &t->first; *pp; pp = &(*pp)->next)
    if (*pp == x) { *pp = x->next; t->count--; break; }
  chunk_queue_abort(&x->queue);
  join(x);
  x->kind->release(x);
  chunk_queue_destroy(&x->queue);
  uv_mutex_destroy(&x->lock);
  uv_close((uv_handle_t *)&x->wake, free_op);
}

archive_op *archive_op_find(const session *s, const char *id, const archive_op_kind *kind) {
  for (archive_op *x = table()->first; x; x = x->next)
    if (x->session == s && strcmp(x->id, id) == 0 && (!kind || x->kind == kind)) return x;
  return NULL;
}

/* Ends x from outside: its worker stopped first, then everything it owes answered with code and message. */
static void end_op(archive_op *x, const char *code, const char *message) {
  chunk_queue_abort(&x->queue);
  join(x);
  x->kind->answer_all(x, code, message);
  archive_op_free(x);
}

void archives_close_session(session *s) {
  char message[256];
  for (archive_op *x = table()->first, *next; x; x = next) {
    next = x->next;
    if (x->session != s) continue;
    snprintf(message, sizeof message, "%s: session %s was closed while archive %s was in flight",
             x->kind->method, s->id, x->id);
    end_op(x, "unknown_session", message);
  }
}

void method_abort_archive(request *r, session *s, const cJSON *params) {
  const char *id = NULL;
  failure f;
  if (!param_string(params, "archive_id", false, &id, &f)) { reply_failure(r, &f); return; }
  archive_op *x = archive_op_find(s, id, NULL);
  if (!x) { reply_error(r, "invalid_request", "abort_archive: no archive `%s` in flight in session %s", id, s->id); return; }
  char message[256];
  snprintf(message, sizeof message, "%s: archive %s was aborted (abort_archive)", x->kind->method, x->id);
  end_op(x, "io_error", message);
  reply_result(r, cJSON_CreateObject());
}

bool archives_paused(void) {
  return table()->paused;
}

void archives_set_paused(bool on) {
  archive_table *t = table();
  t->paused = on;
  if (on) return;
  for (archive_op *x = t->first, *next; x; x = next) {
    next = x->next;   /* woken may end x, never another */
    x->kind->woken(x);
  }
}

void archives_free(void) {
  provider *ctx = provider_ctx();
  free(ctx->archives);
  ctx->archives = NULL;
}
