/*
** Serving (see server.h).
*/
#define _GNU_SOURCE
#include "server.h"

#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive_methods.h"
#include "context.h"
#include "envelope.h"
#include "lifecycle.h"
#include "methods.h"
#include "process.h"
#include "signames.h"
#include "wire.h"

/* Serving's state (the context's part). */
typedef struct server {
  uv_signal_t signals[3];
  bool signals_open;
  bool stopping;
} server;

static server *the_server(void) {
  return CTX_PART(server);
}

/*
** Stops serving (see server.h). abandon: stopping on a signal, so stdout
** is closed without waiting for a host that may never read it.
*/
static void stop(request *shutdown_req, bool abandon) {
  server *srv = the_server();
  if (srv->stopping) {
    if (shutdown_req) reply_result(shutdown_req, cJSON_CreateObject());
    return;
  }
  srv->stopping = true;
  wire_stop_reading();
  if (srv->signals_open) {
    srv->signals_open = false;
    for (size_t i = 0; i < 3; i++) uv_close((uv_handle_t *)&srv->signals[i], NULL);
  }
  sessions_close_all();
  if (shutdown_req) reply_result(shutdown_req, cJSON_CreateObject());
  wire_finish(abandon);
}

static void serve_request(request *r, const cJSON *params) {
  if (strcmp(r->method, "shutdown") == 0) stop(r, false);
  else methods_dispatch(r, params);
}

static void on_line(char *line, size_t len) {
  if (the_server()->stopping) return;
  envelope_decode(line, len, serve_request);
}

static void on_end(wire_end why) {
  if (why == WIRE_EOF_MID_LINE) envelope_reject("the last request line has no newline before the end of input");
  if (why == WIRE_LINE_TOO_LONG) envelope_reject("request line longer than 256 MiB; closing the connection");
  stop(NULL, false);
}

/* A host that does not read its replies: commands whose output streams to it pause too, and archives being read. */
static void on_congested(bool on) {
  procs_set_paused(on);
  archives_set_paused(on);
}

static void on_signal(uv_signal_t *h, int signo) {
  (void)h;
  fprintf(stderr, "smolwf-provider: got SIG%s, closing every session\n", signal_to_name(signo));
  stop(NULL, true);
}

static void start_signals(uv_loop_t *loop, server *srv) {
  static const int signos[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < 3; i++) {
    uv_signal_init(loop, &srv->signals[i]);
    uv_signal_start(&srv->signals[i], on_signal, signos[i]);
  }
  srv->signals_open = true;
}

/*
** Every output event is one malloc'ed line of ~350 KiB, freed once written.
** With glibc's defaults the heap top is trimmed (brk) as soon as the queue
** drains and grown again for the next line, so each event paid fresh page
** faults and zeroed pages (perf: ~6% of streaming in exc_page_fault,
** clear_page and memcg charging; strace: a brk per two events). Keeping up
** to TRIM_KEEP of free heap stops that churn; lines above MMAP_ABOVE (a
** large exec result) still get their own mapping, returned when freed.
** Setting either value switches off glibc's dynamic thresholds, so both are set.
*/
#define TRIM_KEEP (16 * 1024 * 1024)
#define MMAP_ABOVE (32 * 1024 * 1024)

static void tune_heap(void) {
  mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE);
  mallopt(M_TRIM_THRESHOLD, TRIM_KEEP);
}

int server_start(uv_loop_t *loop) {
  tune_heap();
  static const wire_hooks hooks = {.line = on_line, .end = on_end, .congested = on_congested};
  if (wire_start(loop, &hooks) < 0) return -1;
  start_signals(loop, the_server());
  return 0;
}

void server_free(void) {
  provider *ctx = provider_ctx();
  wire_free();
  free(ctx->server);
  ctx->server = NULL;
}
