/*
** A bounded queue of byte chunks between the loop and one worker thread
** (the archive methods: the loop hands a tar's chunks to the extracting
** worker, the packing worker hands its output to the loop). Either side
** may wait for the other: a pop until a chunk comes, a push until there
** is room; the queue's owner ends the stream (no more chunks) or aborts
** it (both sides stop waiting). The lock and condition are libuv's.
*/
#ifndef SMOL_CHUNK_QUEUE_H
#define SMOL_CHUNK_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef struct chunk {
  char *data;              /* malloc'ed; freed with the chunk */
  size_t len;
  struct chunk *next;
} chunk;

typedef struct chunk_queue {
  uv_mutex_t lock;
  uv_cond_t changed;       /* a chunk came or went, or the stream ended or aborted */
  chunk *head, *tail;
  size_t count, cap;       /* chunks queued; the most a push without waiting accepts */
  bool ended;              /* the producer sent its last chunk */
  bool aborted;            /* stop: pushes and pops return at once */
} chunk_queue;

/* A chunk owning data (malloc'ed, len bytes). */
chunk *chunk_new(char *data, size_t len);
void chunk_free(chunk *c);

void chunk_queue_init(chunk_queue *q, size_t cap);

/* Frees the queued chunks and the lock; nobody may use q any more. */
void chunk_queue_destroy(chunk_queue *q);

/*
** Appends c, waiting while the queue holds cap chunks (wait) or failing
** at once (!wait). False when it was not taken (aborted, or full without
** waiting): c is still the caller's.
*/
bool chunk_queue_push(chunk_queue *q, chunk *c, bool wait);

/*
** The oldest chunk, waiting for one while the stream goes on (wait).
** NULL once the stream ended and is empty, when aborted, or when empty
** without waiting.
*/
chunk *chunk_queue_pop(chunk_queue *q, bool wait);

/* The producer's last chunk is queued / stop everything. Both wake the other side. */
void chunk_queue_end(chunk_queue *q);
void chunk_queue_abort(chunk_queue *q);

/* Reads of the flags under the lock. */
size_t chunk_queue_count(chunk_queue *q);
bool chunk_queue_aborted(chunk_queue *q);

#endif
