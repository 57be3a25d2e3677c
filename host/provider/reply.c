/*
** Composing reply lines (see reply.h).
*/
#define _GNU_SOURCE
#include "reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "utf8.h"
#include "wire.h"

/* Appends s to the line being composed. */
static char *append(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

/*
** Room for the JSON of the objects most lines carry (an event, an exec's
** result without its output, an error): printed on the stack, they cost
** no malloc, realloc and free of cJSON's own buffer. Larger ones are
** printed by cJSON_PrintUnformatted, after an attempt here that stops at
** this size.
*/
#define SMALL_OBJECT 1024

/*
** OBJ as JSON text (*len bytes), valid UTF-8 whatever its strings hold,
** in small (when it fits) or in a buffer to free (*to_free). cJSON copies bytes of 0x80
** and above as they are, so a name or message that came from outside (a
** file name in a message) could carry bytes that are no UTF-8; those only
** occur inside strings, where U+FFFD in their place keeps the text valid
** JSON. Checking is one pass over a short text: the large payloads of a
** line are base64, added after.
*/
static const char *printed(const cJSON *obj, char small[SMALL_OBJECT], char **to_free, size_t *len) {
  /* 5 bytes short of the buffer: cJSON.h warns that its estimate of the room it needs may be off by that */
  char *text = cJSON_PrintPreallocated((cJSON *)obj, small, SMALL_OBJECT - 5, 0) ? small : cJSON_PrintUnformatted(obj);
  if (!text) abort();
  *to_free = text == small ? NULL : text;
  *len = strlen(text);
  if (utf8_valid(text, *len, NULL)) return text;
  char *repaired = utf8_repair(text, *len, len);
  if (!repaired) abort();
  free(*to_free);
  *to_free = repaired;
  return repaired;
}

/*
** Builds `{"id":ID,"KIND":OBJ}\n` where the blobs become extra string
** fields of OBJ, base64-encoded straight into the line: an exec result can
** hold 64 MiB per stream, and this is its only copy. A frame's `tail` (n
** bytes) follows the line as it is. Returns the line (malloc'ed, *len bytes).
*/
static char *composed(const char *id_json, const char *kind, cJSON *obj, const blob *blobs, size_t nblobs,
                      const char *tail, size_t n, size_t *len) {
  char small[SMALL_OBJECT], *to_free;
  size_t tlen;
  const char *text = printed(obj, small, &to_free, &tlen);
  cJSON_Delete(obj);
  tlen--;   /* without the closing '}' */
  size_t id_len = strlen(id_json), kind_len = strlen(kind);
  size_t total = id_len + kind_len + tlen + 32 + n;
  for (size_t i = 0; i < nblobs; i++) total += strlen(blobs[i].field) + b64_encoded_len(blobs[i].len) + 8;
  char *line = malloc(total), *p = line;
  if (!line) abort();
  p = append(p, "{\"id\":", 6);
  p = append(p, id_json, id_len);
  p = append(p, ",\"", 2);
  p = append(p, kind, kind_len);
  p = append(p, "\":", 2);
  p = append(p, text, tlen);
  bool empty = tlen == 1;
  for (size_t i = 0; i < nblobs; i++, empty = false) {
    if (!empty) *p++ = ',';
    *p++ = '"';
    p = append(p, blobs[i].field, strlen(blobs[i].field));
    p = append(p, "\":\"", 3);
    p += b64_encode((const unsigned char *)blobs[i].data, blobs[i].len, p);
    *p++ = '"';
  }
  p = append(p, "}}\n", 3);
  if (n > 0) p = append(p, tail, n);   /* the payload's one copy: the read buffer it came from is reused */
  free(to_free);
  *len = (size_t)(p - line);
  return line;
}

static void compose(const char *id_json, const char *kind, cJSON *obj, const blob *blobs, size_t nblobs,
                    const char *tail, size_t n) {
  size_t len;
  char *line = composed(id_json, kind, obj, blobs, nblobs, tail, n, &len);
  wire_send(line, len);
}

request *request_new(char *id_json, const char *method) {
  request *r = calloc(1, sizeof *r);
  if (!r) abort();
  r->id_json = id_json ? id_json : strdup("null");
  size_t n = strnlen(method, sizeof r->method - 1);   /* cut as snprintf would, without its ~500 instructions */
  memcpy(r->method, method, n);
  return r;
}

void request_free(request *r) {
  if (!r) return;
  free(r->id_json);
  free(r);
}

void reply_result_blobs(request *r, cJSON *result, const blob *blobs, size_t nblobs) {
  compose(r->id_json, "result", result, blobs, nblobs, NULL, 0);
  request_free(r);
}

void reply_result(request *r, cJSON *result) {
  reply_result_blobs(r, result, NULL, 0);
}

void reply_failure(request *r, const failure *f) {
  cJSON *err = cJSON_CreateObject();
  cJSON_AddStringToObject(err, "code", f->code);
  cJSON_AddStringToObject(err, "message", f->message);
  compose(r->id_json, "error", err, NULL, 0, NULL, 0);
  request_free(r);
}

void reply_error(request *r, const char *code, const char *fmt, ...) {
  failure f;
  va_list ap;
  va_start(ap, fmt);
  vfail(&f, code, fmt, ap);
  va_end(ap);
  reply_failure(r, &f);
}

void send_event_blobs(const request *r, cJSON *event, const blob *blobs, size_t nblobs) {
  compose(r->id_json, "event", event, blobs, nblobs, NULL, 0);
}

void send_event_frame(const request *r, cJSON *event, const char *data, size_t n) {
  cJSON_AddNumberToObject(event, "data_bytes", (double)n);
  compose(r->id_json, "event", event, NULL, 0, data, n);
}

void send_event_spliced(const request *r, cJSON *event, int fd, size_t n) {
  cJSON_AddNumberToObject(event, "data_bytes", (double)n);
  size_t len;
  char *line = composed(r->id_json, "event", event, NULL, 0, NULL, 0, &len);
  wire_send_spliced(line, len, fd, n);
}

void send_event(const request *r, cJSON *event) {
  compose(r->id_json, "event", event, NULL, 0, NULL, 0);
}

void replies_send_now(void) {
  wire_flush();
}
