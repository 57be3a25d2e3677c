/*
** The method table (see methods.h).
*/
#include "methods.h"

#include <string.h>

#include "archive_methods.h"
#include "describe.h"
#include "fileops.h"
#include "lifecycle.h"
#include "opening.h"
#include "process_methods.h"
#include "removing.h"
#include "session.h"

typedef void (*plain_handler)(request *r, const cJSON *params);
typedef void (*session_handler)(request *r, session *s, const cJSON *params);

static const struct method {
  const char *name;
  plain_handler plain;
  session_handler with_session;
} methods[] = {
  {"open", method_open, NULL},
  {"close", method_close, NULL},
  {"fork", NULL, method_fork},
  {"describe", method_describe, NULL},
  {"create_dir_all", NULL, method_create_dir_all},
  {"write_file", NULL, method_write_file},
  {"read_file", NULL, method_read_file},
  {"remove", NULL, method_remove},
  {"create_temp_dir", NULL, method_create_temp_dir},
  {"stat", NULL, method_stat},
  {"list_dir", NULL, method_list_dir},
  {"exec", NULL, method_exec},
  {"spawn", NULL, method_spawn},
  {"wait", NULL, method_wait},
  {"kill", NULL, method_kill},
  {"write_stdin", NULL, method_write_stdin},
  {"write_archive", NULL, method_write_archive},
  {"read_archive", NULL, method_read_archive},
  {"read_archive_ack", NULL, method_read_archive_ack},
  {"abort_archive", NULL, method_abort_archive},
};

/*
** The session named by params.session.id, or NULL after answering r with
** the reason. Only the id is read, so {"id": S} alone serves as well as
** the whole object open returned (the session_by_id capability).
*/
static session *lookup_session(request *r, const cJSON *params) {
  const cJSON *obj = cJSON_GetObjectItemCaseSensitive(params, "session");
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
  if (!cJSON_IsObject(obj) || !cJSON_IsString(id)) {
    reply_error(r, "invalid_request", "%s: field `session` must be the session object that open returned (or {\"id\": ID})", r->method);
    return NULL;
  }
  session *s = session_find(id->valuestring);
  if (!s) reply_error(r, "unknown_session", "%s: no open session `%s`", r->method, id->valuestring);
  return s;
}

void methods_dispatch(request *r, const cJSON *params) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    const struct method *m = &methods[i];
    if (strcmp(m->name, r->method) != 0) continue;
    if (m->plain) { m->plain(r, params); return; }
    if (!params) {
      reply_error(r, "invalid_request", "%s: the request has no `params`: an object with `session` (the object open returned)", r->method);
      return;
    }
    session *s = lookup_session(r, params);
    if (s) m->with_session(r, s, params);
    return;
  }
  reply_error(r, "unknown_method", "unknown method `%s`", r->method);
}
