/*
** read_archive and read_archive_ack (see archive_methods.h): a tar of a
** session's paths streamed out as `chunk` events.
**
** The paths are resolved on the loop (by text and one open beneath the
** session's area each, as every file method resolves them); a worker
** packs them (pack.c) into a queue of READ_QUEUE chunks and waits while
** it is full. The loop sends what the queue holds while the wire is not
** congested and, when the request gave a `window`, while fewer than that
** many chunks are unacknowledged (read_archive_ack).
*/
#define _GNU_SOURCE
#include "archive_methods.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "archive_op.h"
#include "pack.h"
#include "params.h"
#include "paths.h"

/* Chunks the worker may have ready before the loop sends them. */
#define READ_QUEUE 4

typedef struct read_op {
  archive_op op;
  request *req;
  pack_item *items;            /* their fds, names and members are ours */
  size_t nitems;
  uint64_t sent, acked, window;   /* chunks sent and acknowledged; window 0: no acknowledgements */
  bool follow_links;
} read_op;

static const archive_op_kind read_kind;

static read_op *read_of(archive_op *x) {
  return (read_op *)x;
}

/* ===== the loop side ===== */

static void send_chunk(read_op *rd, chunk *c) {
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", "chunk");
  blob data = {"data_base64", c->data, c->len};
  send_event_blobs(rd->req, ev, &data, 1);
  rd->sent++;
  chunk_free(c);
}

static void answer_end(read_op *rd, const op_result *res) {
  request *r = rd->req;
  rd->req = NULL;
  if (!res->ok) { reply_failure(r, &res->fail); return; }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "entries", (double)res->entries);
  cJSON_AddNumberToObject(o, "bytes", (double)res->bytes);
  reply_result(r, o);
}

/* Sends what the window and the wire allow; once the worker is done and all is sent, the result. */
static void on_woken(archive_op *x) {
  read_op *rd = read_of(x);
  chunk *c;
  while (!archives_paused() && (rd->window == 0 || rd->sent - rd->acked < rd->window) &&
         (c = chunk_queue_pop(&x->queue, false)))
    send_chunk(rd, c);
  op_result res;
  if (chunk_queue_count(&x->queue) > 0 || !archive_op_finished(x, &res)) return;
  if (chunk_queue_count(&x->queue) > 0) return;   /* the last chunks came with the end */
  answer_end(rd, &res);
  archive_op_free(x);
}

static void answer_all(archive_op *x, const char *code, const char *message) {
  read_op *rd = read_of(x);
  if (!rd->req) return;
  reply_error(rd->req, code, "%s", message);
  rd->req = NULL;
}

static void release(archive_op *x) {
  read_op *rd = read_of(x);
  answer_all(x, "internal", "read_archive: the archive ended without an answer");   /* never: callers answer first */
  for (size_t i = 0; i < rd->nitems; i++) {
    if (rd->items[i].dirfd >= 0) close(rd->items[i].dirfd);
    free((char *)rd->items[i].name);
    free((char *)rd->items[i].rel);
    free((char *)rd->items[i].member);
  }
  free(rd->items);
}

/* ===== the worker ===== */

static bool take(void *ctx, char *data, size_t len) {
  read_op *rd = ctx;
  chunk *c = chunk_new(data, len);
  if (!chunk_queue_push(&rd->op.queue, c, true)) { chunk_free(c); return false; }
  archive_op_wake(&rd->op);
  return true;
}

static void work(archive_op *x, op_result *res) {
  read_op *rd = read_of(x);
  pack_sink sink = {take, rd};
  pack_stats st;
  res->ok = pack(rd->items, rd->nitems, rd->follow_links, &sink, &st, &res->fail);
  res->entries = st.entries;
  res->bytes = st.bytes;
}

static const archive_op_kind read_kind = {"read_archive", work, on_woken, answer_all, release};

/* ===== requests ===== */

/* The part of the normalised path view below base ("" for base itself), or NULL when it is not below. */
static const char *member_below(const char *view, const char *base) {
  size_t n = strcmp(base, "/") == 0 ? 0 : strlen(base);
  if (strncmp(view, base, n) != 0 || (view[n] != '/' && view[n] != '\0')) return NULL;
  return view[n] == '/' ? view + n + 1 : view + n;
}

/* One of params.paths, relative to base (a normalised view), as an item to pack. */
static bool add_item(read_op *rd, session *s, const char *base, const char *path, failure *f) {
  char joined[PATH_MAX];
  if (path[0] != '/' && *path) path_join(joined, base, path);
  else snprintf(joined, sizeof joined, "%s", path);
  resolved p;
  if (!path_resolve(s, "read_archive", joined, &p, f)) return false;
  const char *member = member_below(p.view, base);
  if (!member)
    return fail(f, "invalid_request", "read_archive `%s`: not below the directory the names start from (`%s`); "
                "give a `cwd` that holds every path", path, base);
  const char *name;
  int fd = path_open_parent(&p, &name);
  if (fd < 0) return fail_errno(f, -fd, "read_archive", path);
  rd->items[rd->nitems++] = (pack_item){p.area_fd, strdup(p.rel), fd, name ? strdup(name) : NULL, strdup(member)};
  return true;
}

/* params.cwd (default: the session's cwd) as a normalised view: the names in the archive start there. */
static bool base_of(session *s, const cJSON *params, char *base, failure *f) {
  const char *cwd = NULL;
  if (!param_string(params, "cwd", true, &cwd, f)) return false;
  if (!cwd) { snprintf(base, PATH_MAX, "%s", s->cwd_view); return true; }
  resolved p;
  if (!path_resolve(s, "read_archive: cwd", cwd, &p, f)) return false;
  snprintf(base, PATH_MAX, "%s", p.view);
  return true;
}

static bool prepare(read_op *rd, session *s, const cJSON *params, failure *f) {
  char **paths = NULL, base[PATH_MAX];
  if (!param_uint(params, "window", &rd->window, f) || !param_bool(params, "follow_links", &rd->follow_links, f) ||
      !base_of(s, params, base, f) ||
      !param_strv(params, "paths", &paths, f)) return false;
  size_t n = 0;
  while (paths[n]) n++;
  rd->items = calloc(n, sizeof *rd->items);
  if (!rd->items) abort();
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) ok = add_item(rd, s, base, paths[i], f);
  strv_free(paths);
  return ok;
}

void method_read_archive(request *r, session *s, const cJSON *params) {
  failure f;
  read_op *rd = (read_op *)archive_op_new(sizeof *rd, &read_kind, s, READ_QUEUE, &f);
  if (!rd) { reply_failure(r, &f); return; }
  if (!prepare(rd, s, params, &f) || !archive_op_start(&rd->op, &f)) {
    archive_op_free(&rd->op);
    reply_failure(r, &f);
    return;
  }
  rd->req = r;
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", "started");
  cJSON_AddStringToObject(ev, "archive_id", rd->op.id);
  send_event(r, ev);
}

void method_read_archive_ack(request *r, session *s, const cJSON *params) {
  failure f;
  const char *id = NULL;
  uint64_t chunks = 0;
  if (!param_string(params, "archive_id", false, &id, &f) || !param_uint(params, "chunks", &chunks, &f) ||
      (!cJSON_GetObjectItemCaseSensitive(params, "chunks") && !fail(&f, "invalid_request", "read_archive_ack: missing field `chunks`"))) {
    reply_failure(r, &f);
    return;
  }
  archive_op *x = archive_op_find(s, id, &read_kind);
  if (!x) { reply_error(r, "invalid_request", "read_archive_ack: no read_archive `%s` in flight in session %s", id, s->id); return; }
  read_op *rd = read_of(x);
  if (chunks > rd->sent) {
    reply_error(r, "invalid_request", "read_archive_ack: archive %s: %llu chunks acknowledged, %llu sent", id,
                (unsigned long long)chunks, (unsigned long long)rd->sent);
    return;
  }
  if (chunks > rd->acked) rd->acked = chunks;
  reply_result(r, cJSON_CreateObject());
  on_woken(x);
}
