/*
** The wire of the provider harnesses (wire.h's functions): reply lines
** are kept in memory for the harness to check instead of going to
** stdout, and nothing is read (the harness hands request lines to the
** envelope itself).
*/
#include "fake_wire.h"

#include <stdlib.h>
#include <string.h>

static char *out;
static size_t out_len, out_cap;

int wire_start(uv_loop_t *loop, const wire_hooks *hooks) {
  (void)loop;
  (void)hooks;
  return 0;
}

void wire_send(char *line, size_t len) {
  if (out_len + len > out_cap) {
    out_cap = (out_len + len) * 2;
    out = realloc(out, out_cap);
    if (!out) abort();
  }
  memcpy(out + out_len, line, len);
  out_len += len;
  free(line);
}

/* The harnesses' output is memory, never a pipe. */
bool wire_can_splice(void) {
  return false;
}

void wire_send_spliced(char *line, size_t len, int fd, size_t n) {
  (void)line; (void)len; (void)fd; (void)n;
  abort();   /* wire_can_splice said no: the provider copies instead */
}

void wire_flush(void) {}   /* lines are kept as they are sent */

void wire_stop_reading(void) {}

void wire_finish(bool abandon) { (void)abandon; }

void wire_free(void) {
  free(out);
  out = NULL;
  out_len = out_cap = 0;
}

const char *fake_wire_output(size_t *len) {
  *len = out_len;
  return out;
}

void fake_wire_clear(void) {
  out_len = 0;
}
