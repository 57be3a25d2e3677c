/*
** write_archive (see archive_methods.h): a tar streamed into a session.
**
** The first request (no archive_id) names the target directory and
** starts a worker that extracts (unpack.c) what the requests bring; each
** request's data is queued for it, and the request is answered once the
** worker takes that data, so a client waiting for its answers cannot get
** more than WRITE_QUEUE chunks ahead. The request with `eof` is answered
** when the extraction has ended, with its entries and bytes. A failure is
** kept, and answers every request of the archive until the one with eof
** (or abort_archive) forgets it.
*/
#define _GNU_SOURCE
#include "archive_methods.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "archive_op.h"
#include "base64.h"
#include "disk_cap.h"
#include "params.h"
#include "paths.h"
#include "unpack.h"

/* Chunks that may wait for the worker: a client keeping at most this many requests unanswered never meets the limit. */
#define WRITE_QUEUE 4
/* The most data one request may carry. */
#define WRITE_MAX_CHUNK (16u * 1024 * 1024)

/* A request whose data the worker has not taken yet. */
typedef struct waiting {
  request *req;
  uint64_t seq;                /* its chunk's number, from 1 */
  struct waiting *next;
} waiting;

typedef struct write_op {
  archive_op op;
  int dirfd;                   /* the target directory (O_PATH) */
  uint64_t pushed;             /* chunks queued so far */
  uint64_t received;           /* bytes the requests brought, past the archive's end too */
  waiting *head, *tail;
  request *eof_req;            /* answered at the end */
  bool finished;               /* the worker is done: result below */
  op_result result;
  chunk *current;              /* the worker's: the chunk libarchive reads */
} write_op;

static const archive_op_kind write_kind;

static write_op *write_of(archive_op *x) {
  return (write_op *)x;
}

/* ===== answers ===== */

static cJSON *id_object(const archive_op *x) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "archive_id", x->id);
  return o;
}

/* A request whose data was taken (or not needed): {archive_id}, or the archive's failure. */
static void answer_taken(write_op *w, request *r) {
  if (w->finished && !w->result.ok) reply_failure(r, &w->result.fail);
  else reply_result(r, id_object(&w->op));
}

/* The request with eof, once the worker is done; the archive is forgotten. */
static void answer_end(write_op *w, request *r) {
  if (!w->result.ok) { reply_failure(r, &w->result.fail); return; }
  cJSON *o = id_object(&w->op);
  cJSON_AddNumberToObject(o, "entries", (double)w->result.entries);
  cJSON_AddNumberToObject(o, "bytes", (double)w->received);
  reply_result(r, o);
}

static void answer_waiting(write_op *w, uint64_t upto) {
  while (w->head && w->head->seq <= upto) {
    waiting *first = w->head;
    w->head = first->next;
    if (!w->head) w->tail = NULL;
    answer_taken(w, first->req);
    free(first);
  }
}

static void on_woken(archive_op *x) {
  write_op *w = write_of(x);
  answer_waiting(w, archive_op_taken(x));
  if (w->finished || !archive_op_finished(x, &w->result)) return;
  w->finished = true;
  answer_waiting(w, UINT64_MAX);   /* data past the archive's end is not needed */
  if (w->eof_req) {
    answer_end(w, w->eof_req);
    w->eof_req = NULL;
    archive_op_free(x);
  }
}

static void answer_all(archive_op *x, const char *code, const char *message) {
  write_op *w = write_of(x);
  failure f = {.code = code};
  snprintf(f.message, sizeof f.message, "%s", message);
  for (waiting *q = w->head, *next; q; q = next) {
    next = q->next;
    reply_failure(q->req, &f);
    free(q);
  }
  w->head = w->tail = NULL;
  if (w->eof_req) reply_failure(w->eof_req, &f);
  w->eof_req = NULL;
}

static void release(archive_op *x) {
  write_op *w = write_of(x);
  answer_all(x, "internal", "write_archive: the archive ended without an answer");   /* never: callers answer first */
  if (w->dirfd >= 0) close(w->dirfd);
  chunk_free(w->current);
}

/* ===== the worker ===== */

static ssize_t read_chunk(void *ctx, const void **data) {
  write_op *w = ctx;
  chunk_free(w->current);
  w->current = chunk_queue_pop(&w->op.queue, true);
  if (!w->current) return chunk_queue_aborted(&w->op.queue) ? -1 : 0;
  archive_op_note_taken(&w->op);
  *data = w->current->data;
  return (ssize_t)w->current->len;
}

static void work(archive_op *x, op_result *res) {
  write_op *w = write_of(x);
  const profile *p = x->session->profile;
  unpack_limits lim = {.cap = p->limits.disk_bytes, .profile = p->name};
  if (lim.cap) lim.used = disk_usage(x->session, lim.cap);
  unpack_source src = {read_chunk, w};
  unpack_stats st;
  res->ok = unpack(w->dirfd, &src, &lim, &st, &res->fail);
  res->entries = st.entries;
}

static const archive_op_kind write_kind = {"write_archive", work, on_woken, answer_all, release};

/* ===== requests ===== */

/* Hands one request's data (taken over) to the archive; r is answered now or once the data is taken. */
static void feed(write_op *w, request *r, char *data, size_t len, bool eof) {
  if (w->finished) {
    w->received += len;
    free(data);
    if (!eof) { answer_taken(w, r); return; }
    answer_end(w, r);
    archive_op_free(&w->op);
    return;
  }
  if (w->eof_req) { free(data); reply_error(r, "invalid_request", "write_archive: archive %s has had its eof already", w->op.id); return; }
  if (len > 0) {
    chunk *c = chunk_new(data, len);
    if (!chunk_queue_push(&w->op.queue, c, false)) {
      chunk_free(c);
      reply_error(r, "limit_exceeded", "write_archive: archive %s has %d chunks waiting already; send the next once "
                  "one is answered", w->op.id, WRITE_QUEUE);
      return;
    }
    w->pushed++;
    w->received += len;
  } else {
    free(data);
  }
  if (eof) { w->eof_req = r; chunk_queue_end(&w->op.queue); return; }
  if (len == 0) { answer_taken(w, r); return; }
  waiting *q = calloc(1, sizeof *q);
  if (!q) abort();
  *q = (waiting){.req = r, .seq = w->pushed};
  if (w->tail) w->tail->next = q; else w->head = q;
  w->tail = q;
}

/* The target directory of a new archive: params.path (default: the session's cwd), which must exist. */
static int open_target(session *s, const cJSON *params, failure *f) {
  const char *path = ".";
  resolved p;
  if (!param_string(params, "path", true, &path, f) || !path_resolve(s, "write_archive", path, &p, f)) return -1;
  int fd = path_open(&p, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) fail_errno(f, -fd, "write_archive", p.given);
  return fd;
}

static write_op *start(session *s, const cJSON *params, failure *f) {
  int dirfd = open_target(s, params, f);
  if (dirfd < 0) return NULL;
  write_op *w = (write_op *)archive_op_new(sizeof *w, &write_kind, s, WRITE_QUEUE, f);
  if (!w) { close(dirfd); return NULL; }
  w->dirfd = dirfd;
  if (archive_op_start(&w->op, f)) return w;
  archive_op_free(&w->op);
  return NULL;
}

/* The archive a later request names; its first request alone may name the target. */
static write_op *continued(session *s, const cJSON *params, const char *id, failure *f) {
  if (cJSON_GetObjectItemCaseSensitive(params, "path"))
    return fail(f, "invalid_request", "write_archive: `path` belongs to the first request of an archive only"), NULL;
  archive_op *x = archive_op_find(s, id, &write_kind);
  if (!x) fail(f, "invalid_request", "write_archive: no archive `%s` in flight in session %s", id, s->id);
  return (write_op *)x;
}

/* params.data_base64 decoded, refused unread when it is too large for one request. */
static bool chunk_param(const cJSON *params, char **data, size_t *len, failure *f) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, "data_base64");
  if (cJSON_IsString(v) && strlen(v->valuestring) > b64_encoded_len(WRITE_MAX_CHUNK))
    return fail(f, "limit_exceeded", "write_archive: `data_base64` holds more than %u bytes; send it in smaller chunks",
                WRITE_MAX_CHUNK);
  return param_base64(params, "data_base64", data, len, f);
}

void method_write_archive(request *r, session *s, const cJSON *params) {
  failure f;
  const char *id = NULL;
  bool eof = false;
  char *data = NULL;
  size_t len = 0;
  if (!param_string(params, "archive_id", true, &id, &f) || !param_bool(params, "eof", &eof, &f) ||
      !chunk_param(params, &data, &len, &f)) { reply_failure(r, &f); return; }
  write_op *w = id ? continued(s, params, id, &f) : start(s, params, &f);
  if (!w) { free(data); reply_failure(r, &f); return; }
  feed(w, r, data, len, eof);
}
