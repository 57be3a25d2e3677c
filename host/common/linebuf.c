/*
** JSON Lines framing with a line cap (see linebuf.h for the contract).
** Complete lines are handed to the callback straight from the caller's
** bytes when possible; only an unfinished tail is copied into lb->buf.
*/
#include "linebuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Lines past this size are rare: their buffer grows by halves and is not kept. */
#define LINEBUF_BIG ((size_t)16 << 20)

void linebuf_init(linebuf *lb, size_t max_line) {
  lb->buf = NULL;
  lb->len = lb->cap = 0;
  lb->max_line = max_line;
}

void linebuf_free(linebuf *lb) {
  free(lb->buf);
  linebuf_init(lb, lb->max_line);
}

size_t linebuf_pending(const linebuf *lb) { return lb->len; }

/* Makes room for 'extra' more bytes plus a '\0'; 0 on success, -1 on ENOMEM. */
static int lb_reserve(linebuf *lb, size_t extra) {
  size_t need = lb->len + extra + 1;
  if (need <= lb->cap) return 0;
  size_t cap = lb->cap ? lb->cap : 256;
  /* doubling, then by halves past BIG: a huge line costs at most 1.5x itself */
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap < LINEBUF_BIG ? cap * 2 : cap + cap / 2;
  char *p = realloc(lb->buf, cap);
  if (p == NULL) return -1;
  lb->buf = p;
  lb->cap = cap;
  return 0;
}

static int lb_append(linebuf *lb, const char *data, size_t n) {
  if (lb->len + n > lb->max_line) return -1;
  if (lb_reserve(lb, n) != 0) return -1;
  memcpy(lb->buf + lb->len, data, n);
  lb->len += n;
  lb->buf[lb->len] = '\0';
  return 0;
}

/*
** Emits one line ending at 'nl' (data..nl). A line that started in an
** earlier feed is completed in lb->buf; otherwise the caller's bytes are
** copied only to get the '\0' the callback is promised.
*/
static int lb_emit(linebuf *lb, const char *data, const char *nl,
                   linebuf_cb on_line, void *ctx) {
  size_t n = (size_t)(nl - data);
  if (lb_append(lb, data, n) != 0) return -1;
  size_t len = lb->len;  /* with the part carried over from earlier feeds */
  lb->len = 0;  /* the line is handed over: the next feed starts a new one */
  int stop = on_line(ctx, lb->buf, len);
  if (lb->cap > LINEBUF_BIG) linebuf_free(lb);   /* a huge line's buffer is not kept for the next */
  return stop ? 1 : 0;
}

int linebuf_feed(linebuf *lb, const char *data, size_t n,
                 linebuf_cb on_line, void *ctx) {
  const char *end = data + n;
  while (data < end) {
    const char *nl = memchr(data, '\n', (size_t)(end - data));
    if (nl == NULL) return lb_append(lb, data, (size_t)(end - data));
    int rc = lb_emit(lb, data, nl, on_line, ctx);
    if (rc != 0) return rc;
    data = nl + 1;
  }
  return 0;
}
