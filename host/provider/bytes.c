/*
** Output buffers (see bytes.h).
*/
#include "bytes.h"

#include <stdlib.h>
#include <string.h>

void bytes_append(bytes *b, const char *data, size_t n) {
  if (n == 0) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64 * 1024;
    while (cap < b->len + n) cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown) abort();   /* at most max_output_bytes per stream: a request the provider accepted */
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, data, n);
  b->len += n;
}

void bytes_free(bytes *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

void ring_push(ring *r, size_t cap, const char *data, size_t n) {
  if (!r->data) {
    r->data = malloc(cap);
    if (!r->data) abort();
    r->cap = cap;
  }
  if (n > r->cap) { r->dropped += n - r->cap; data += n - r->cap; n = r->cap; }
  size_t over = r->len + n > r->cap ? r->len + n - r->cap : 0;
  r->head = (r->head + over) % r->cap;   /* oldest bytes give way */
  r->len -= over;
  r->dropped += over;
  for (size_t done = 0; done < n;) {
    size_t at = (r->head + r->len) % r->cap;
    size_t room = at >= r->head ? r->cap - at : r->head - at;
    size_t k = n - done < room ? n - done : room;
    memcpy(r->data + at, data + done, k);
    r->len += k;
    done += k;
  }
}

void ring_free(ring *r) {
  free(r->data);
  memset(r, 0, sizeof *r);
}
