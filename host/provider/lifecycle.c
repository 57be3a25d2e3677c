/*
** Closing sessions (see lifecycle.h).
*/
#define _GNU_SOURCE
#include "lifecycle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive_methods.h"
#include "bwrap_probe.h"
#include "capabilities.h"
#include "discard.h"
#include "disk_cap.h"
#include "opening.h"
#include "process.h"
#include "removing.h"
#include "root.h"
#include "session.h"

/* ===== close ===== */

/* Kills the session's processes (answering what they owe) and ends its backend; out of the table. */
static void session_end(session *s) {
  s->closing = true;
  session_remove(s);
  archives_close_session(s);
  procs_close_session(s);
  if (s->backend) s->backend->close(s);
  disk_watch_close(s);
}

void sessions_close_every(void) {
  openings_cancel_all();
  removes_finish();   /* each answered; a session closed meanwhile is discarded by it */
  while (session_first()) {
    session *s = session_first();
    session_end(s);
    session_discard(s, NULL, NULL, NULL);
  }
  discards_finish();   /* every sandbox ended and every session's files removed, in parallel */
}

void sessions_close_all(void) {
  sessions_close_every();
  root_remove();
}

void method_close(request *r, const cJSON *params) {
  /* The original sends the session object itself; {"session": {...}} is accepted too. */
  const cJSON *obj = cJSON_GetObjectItemCaseSensitive(params, "session");
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(obj) ? obj : params, "id");
  if (!cJSON_IsString(id)) { reply_error(r, "invalid_request", "close: params must be the session object (with its `id`)"); return; }
  if (opening_cancel(id->valuestring, r)) return;
  session *s = session_find(id->valuestring);
  if (!s) { reply_error(r, "unknown_session", "close: no open session `%s`", id->valuestring); return; }
  session_end(s);
  if (session_hold_close(s, r)) return;
  session_discard(s, r, NULL, NULL);   /* r is answered once its files are gone */
}
