/*
** Requests and what answers them: every line the provider writes is
** composed here (envelope: docs/protocol.md). A request is answered
** exactly once, by one terminal reply (reply_*), after any number of
** events (send_event*); the line goes to the wire.
*/
#ifndef SMOL_REPLY_H
#define SMOL_REPLY_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "failure.h"

/* A method name is shorter than this (longer ones are no method). */
#define REQUEST_METHOD_MAX 32

/* One request in flight, owned by whoever answers it. */
typedef struct request {
  char *id_json;        /* the id exactly as it must be echoed: "\"a\"", "1" or "null" */
  char method[REQUEST_METHOD_MAX];
} request;

/* Raw bytes sent as a base64 string field of a reply, encoded straight into the line. */
typedef struct blob {
  const char *field;
  const char *data;
  size_t len;
} blob;

/* A request to answer under id_json (taken over; NULL: the id null) for method. */
request *request_new(char *id_json, const char *method);

/* Frees a request that was answered some other way (never needed by handlers). */
void request_free(request *r);

/* The terminal reply. Each consumes r (freed); result is consumed too. */
void reply_result(request *r, cJSON *result);
void reply_result_blobs(request *r, cJSON *result, const blob *blobs, size_t nblobs);
void reply_failure(request *r, const failure *f);
void reply_error(request *r, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

/* An event of r (r stays in flight); event is consumed. */
void send_event(const request *r, cJSON *event);
void send_event_blobs(const request *r, cJSON *event, const blob *blobs, size_t nblobs);

/*
** An output frame of r (docs/protocol.md, "raw_output"): the event line
** with `"data_bytes":n`, then the n bytes themselves, as they are.
*/
void send_event_frame(const request *r, cJSON *event, const char *data, size_t n);

/* The same frame, its n bytes taken from the pipe fd (which holds them) without a copy where the wire can (wire_send_spliced). */
void send_event_spliced(const request *r, cJSON *event, int fd, size_t n);

/*
** Sends the lines composed so far at once instead of before the loop next
** waits: for a caller with cleanup left after a terminal reply, so that
** the host does not wait on that cleanup.
*/
void replies_send_now(void);

#endif
