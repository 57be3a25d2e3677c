/*
** Blocking line I/O shared by the bench programs: a write buffer flushed
** explicitly, and a reader that hands complete lines to a callback.
*/
#ifndef SMOL_BENCH_IO_H
#define SMOL_BENCH_IO_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linebuf.h"

typedef struct outbuf {
  int fd;
  char *buf;
  size_t len, cap;
} outbuf;

static inline void out_flush(outbuf *o) {
  size_t off = 0;
  while (off < o->len) {
    ssize_t n = write(o->fd, o->buf + off, o->len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { perror("bench: write"); exit(1); }
    off += (size_t)n;
  }
  o->len = 0;
}

static inline void out_put(outbuf *o, const char *s, size_t n) {
  if (o->len + n > o->cap) {
    out_flush(o);
    if (n > o->cap) {
      o->cap = n;
      o->buf = realloc(o->buf, n);
      if (o->buf == NULL) { perror("bench: realloc"); exit(1); }
    }
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
}

static inline void out_str(outbuf *o, const char *s) { out_put(o, s, strlen(s)); }

/* Reads once from fd and feeds the lines; returns 0 at EOF, 1 otherwise. */
static inline int read_lines(int fd, linebuf *lb, linebuf_cb cb, void *ctx) {
  static char chunk[65536];
  ssize_t n;
  do n = read(fd, chunk, sizeof chunk); while (n < 0 && errno == EINTR);
  if (n < 0) { perror("bench: read"); exit(1); }
  if (n == 0) return 0;
  if (linebuf_feed(lb, chunk, (size_t)n, cb, ctx) < 0) {
    fprintf(stderr, "bench: line too long\n");
    exit(1);
  }
  return 1;
}

#endif
