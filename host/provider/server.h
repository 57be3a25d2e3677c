/*
** The connection: JSON Lines requests from stdin, replies and events to
** stdout. Requests are dispatched to the method handlers (methods.h); each
** handler answers its request exactly once, now or later (exec, wait).
**
** Replies go through a uv stream on stdout with a bounded queue: when the
** host reads slowly and the queue passes its high mark, the server stops
** reading stdin and asks processes to pause their output pipes until the
** queue drains (procs_pause_output / procs_resume_output).
*/
#ifndef SMOL_SERVER_H
#define SMOL_SERVER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "params.h"

/* One request in flight, owned by whoever answers it. */
typedef struct request {
  char *id_json;        /* the id exactly as it must be echoed: "\"a\"", "1" or "null" */
  char method[32];
} request;

/* Raw bytes sent as a base64 string field of a reply, encoded straight into the line. */
typedef struct blob {
  const char *field;
  const char *data;
  size_t len;
} blob;

/* Sets up stdin, stdout and signal handling on loop. 0, or -1 with a message on stderr. */
int server_init(uv_loop_t *loop);

/* The terminal reply. Both consume r (freed); result is consumed too. */
void reply_result(request *r, cJSON *result);
void reply_result_blobs(request *r, cJSON *result, const blob *blobs, size_t nblobs);
void reply_failure(request *r, const failure *f);
void reply_error(request *r, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* An event of r (r stays in flight); event is consumed. */
void send_event(const request *r, cJSON *event);
void send_event_blobs(const request *r, cJSON *event, const blob *blobs, size_t nblobs);

/* Frees a request that was answered some other way (never needed by handlers). */
void request_free(request *r);

/* True while the output queue is over its high mark. */
bool server_congested(void);

/*
** Stops serving: no more requests are read, every session is closed (their
** requests in flight get error replies), then `shutdown_req` (may be NULL)
** gets {} and stdout is closed once the queue has drained.
*/
void server_stop(request *shutdown_req);

/* Frees what the server still holds, after the loop has ended. */
void server_cleanup(void);

#endif
