/*
** Relaying a sandbox's stderr (see stderr_relay.h).
*/
#include "stderr_relay.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A line longer than this is written in pieces, each behind the prefix. */
#define LINE_MAX_BYTES 4096

struct stderr_relay {
  uv_poll_t watch;
  int fd;
  char prefix[128];
  char line[LINE_MAX_BYTES];
  size_t len;   /* bytes of the line not written yet */
};

static void write_line(stderr_relay *r) {
  if (r->len == 0) return;
  fprintf(stderr, "%s%.*s\n", r->prefix, (int)r->len, r->line);
  r->len = 0;
}

static void take(stderr_relay *r, const char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\n') { write_line(r); continue; }
    r->line[r->len++] = buf[i];
    if (r->len == sizeof r->line) write_line(r);
  }
}

/* Reads what is there now. False at end of file or on an error: nothing more will come. */
static bool drain(stderr_relay *r) {
  char buf[4096];
  for (int reads = 0; reads < 16; reads++) {   /* bounded: a sandbox writing without end waits for the next wake-up */
    ssize_t n = read(r->fd, buf, sizeof buf);
    if (n > 0) { take(r, buf, (size_t)n); continue; }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
  return true;
}

static void free_relay(uv_handle_t *h) {
  stderr_relay *r = h->data;
  close(r->fd);
  free(r);
}

static void finish(stderr_relay *r) {
  write_line(r);
  uv_close((uv_handle_t *)&r->watch, free_relay);
}

static void on_readable(uv_poll_t *w, int status, int events) {
  (void)events;
  stderr_relay *r = w->data;
  if (status < 0 || !drain(r)) {
    uv_poll_stop(w);
    write_line(r);   /* what came without a newline; the relay is freed with the session */
  }
}

stderr_relay *stderr_relay_start(uv_loop_t *loop, int fd, const char *prefix) {
  stderr_relay *r = calloc(1, sizeof *r);
  if (!r) abort();
  r->fd = fd;
  snprintf(r->prefix, sizeof r->prefix, "%s", prefix);
  if (uv_poll_init(loop, &r->watch, fd) < 0) {
    close(fd);
    free(r);
    return NULL;
  }
  r->watch.data = r;
  uv_poll_start(&r->watch, UV_READABLE, on_readable);
  return r;
}

void stderr_relay_stop(stderr_relay *r) {
  if (!r) return;
  if (uv_is_active((uv_handle_t *)&r->watch)) drain(r);
  finish(r);
}
