/*
** The buffers of a process's output: a growable byte buffer (what an
** exec's or a wait's result will hold) and a ring that drops its oldest
** bytes (what a spawned process printed while nobody waited for it).
*/
#ifndef SMOL_BYTES_H
#define SMOL_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct bytes {
  char *data;
  size_t len, cap;
} bytes;

typedef struct ring {
  char *data;
  size_t cap, head, len;
  uint64_t dropped;        /* bytes dropped since the last wait took the buffer */
} ring;

/* Appends n bytes, growing the buffer (aborts when memory is gone). */
void bytes_append(bytes *b, const char *data, size_t n);
void bytes_free(bytes *b);

/* Appends n bytes to a ring of cap bytes (allocated at the first push), dropping the oldest. */
void ring_push(ring *r, size_t cap, const char *data, size_t n);
void ring_free(ring *r);

#endif
