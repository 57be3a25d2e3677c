/*
** The chunk queue (see chunk_queue.h).
*/
#include "chunk_queue.h"

#include <stdlib.h>

chunk *chunk_new(char *data, size_t len) {
  chunk *c = malloc(sizeof *c);
  if (!c) abort();
  *c = (chunk){.data = data, .len = len};
  return c;
}

void chunk_free(chunk *c) {
  if (!c) return;
  free(c->data);
  free(c);
}

void chunk_queue_init(chunk_queue *q, size_t cap) {
  *q = (chunk_queue){.cap = cap};
  uv_mutex_init(&q->lock);
  uv_cond_init(&q->changed);
}

void chunk_queue_destroy(chunk_queue *q) {
  for (chunk *c = q->head, *next; c; c = next) {
    next = c->next;
    chunk_free(c);
  }
  q->head = q->tail = NULL;
  uv_cond_destroy(&q->changed);
  uv_mutex_destroy(&q->lock);
}

bool chunk_queue_push(chunk_queue *q, chunk *c, bool wait) {
  uv_mutex_lock(&q->lock);
  while (wait && !q->aborted && q->count >= q->cap) uv_cond_wait(&q->changed, &q->lock);
  bool taken = !q->aborted && (wait || q->count < q->cap);
  if (taken) {
    c->next = NULL;
    if (q->tail) q->tail->next = c; else q->head = c;
    q->tail = c;
    q->count++;
    uv_cond_broadcast(&q->changed);
  }
  uv_mutex_unlock(&q->lock);
  return taken;
}

chunk *chunk_queue_pop(chunk_queue *q, bool wait) {
  uv_mutex_lock(&q->lock);
  while (wait && !q->aborted && !q->ended && !q->head) uv_cond_wait(&q->changed, &q->lock);
  chunk *c = q->aborted ? NULL : q->head;
  if (c) {
    q->head = c->next;
    if (!q->head) q->tail = NULL;
    q->count--;
    uv_cond_broadcast(&q->changed);
  }
  uv_mutex_unlock(&q->lock);
  return c;
}

static void set_flag(chunk_queue *q, bool *flag) {
  uv_mutex_lock(&q->lock);
  *flag = true;
  uv_cond_broadcast(&q->changed);
  uv_mutex_unlock(&q->lock);
}

void chunk_queue_end(chunk_queue *q) {
  set_flag(q, &q->ended);
}

void chunk_queue_abort(chunk_queue *q) {
  set_flag(q, &q->aborted);
}

size_t chunk_queue_count(chunk_queue *q) {
  uv_mutex_lock(&q->lock);
  size_t n = q->count;
  uv_mutex_unlock(&q->lock);
  return n;
}

bool chunk_queue_aborted(chunk_queue *q) {
  uv_mutex_lock(&q->lock);
  bool aborted = q->aborted;
  uv_mutex_unlock(&q->lock);
  return aborted;
}
