/*
** The unpack command (see unpack_main.h).
*/
#define _GNU_SOURCE
#include "unpack_main.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unpack.h"
#include "utf8.h"

#define READ_BLOCK (1024 * 1024)

typedef struct file_source {
  int fd;
  char *buf;
  int err;                  /* the read error that ended the archive, or 0 */
} file_source;

static ssize_t read_block(void *ctx, const void **data) {
  file_source *s = ctx;
  ssize_t n;
  do n = read(s->fd, s->buf, READ_BLOCK); while (n < 0 && errno == EINTR);
  if (n < 0) { s->err = errno; return -1; }
  *data = s->buf;
  return n;
}

static int print_result(const unpack_stats *st, const failure *f) {
  cJSON *o = cJSON_CreateObject();
  if (f) {
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", f->code);
    /* The message quotes entry names as the archive has them: a line of JSON must be UTF-8. */
    char *message = utf8_repair(f->message, strlen(f->message), NULL);
    cJSON_AddStringToObject(e, "message", message ? message : "(out of memory)");
    free(message);
  } else {
    cJSON_AddNumberToObject(o, "entries", (double)st->entries);
    cJSON_AddNumberToObject(o, "bytes", (double)st->bytes);
  }
  char *text = cJSON_PrintUnformatted(o);
  printf("%s\n", text);
  free(text);
  cJSON_Delete(o);
  return f ? 1 : 0;
}

int unpack_main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: smolwf-provider unpack DIR [ARCHIVE]\n");
    return 2;
  }
  failure f;
  unpack_stats st = {0};
  int dirfd = open(argv[2], O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) return fail_errno(&f, errno, "unpack: directory", argv[2]), print_result(&st, &f);
  file_source src = {argc == 4 ? open(argv[3], O_RDONLY | O_CLOEXEC) : STDIN_FILENO, malloc(READ_BLOCK), 0};
  if (src.fd < 0) { fail_errno(&f, errno, "unpack: archive", argv[3]); close(dirfd); free(src.buf); return print_result(&st, &f); }
  unpack_limits lim = {.what = "unpack"};
  unpack_source source = {read_block, &src};
  bool ok = unpack(dirfd, &source, &lim, &st, &f);
  if (!ok && src.err) fail_errno(&f, src.err, "unpack: reading the archive", argc == 4 ? argv[3] : "(stdin)");
  if (src.fd != STDIN_FILENO) close(src.fd);
  close(dirfd);
  free(src.buf);
  return print_result(&st, ok ? NULL : &f);
}
