/*
** JSON Lines framing: splits a byte stream into '\n'-ended lines with a
** cap on a line's length, so a provider (or host) that sends an endless
** line gets a protocol error rather than eating all memory. Shared by the
** host (provider stdout) and the provider (its stdin).
*/
#ifndef SMOL_LINEBUF_H
#define SMOL_LINEBUF_H

#include <stddef.h>

/* Called once per complete line, without its '\n'; line[len] == '\0'.
** The bytes are valid only during the call. Return non-zero to stop. */
typedef int (*linebuf_cb)(void *ctx, char *line, size_t len);

typedef struct linebuf {
  char *buf;          /* partial line carried between feeds (malloc'ed) */
  size_t len, cap;
  size_t max_line;    /* longest accepted line, in bytes, without '\n' */
} linebuf;

void linebuf_init(linebuf *lb, size_t max_line);
void linebuf_free(linebuf *lb);

/*
** Feeds n bytes. Returns 0 when all went well, 1 when a callback asked to
** stop, -1 when a line exceeds max_line (the stream is then unusable).
*/
int linebuf_feed(linebuf *lb, const char *data, size_t n,
                 linebuf_cb on_line, void *ctx);

/* Bytes of an unfinished line still held (non-zero at EOF: a truncated line). */
size_t linebuf_pending(const linebuf *lb);

#endif
