/*
** Opening and closing sessions (see lifecycle.h).
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
#include "disk_cap.h"
#include "params.h"
#include "paths.h"
#include "process.h"
#include "root.h"
#include "session.h"
#include "workspace.h"

/* ===== close ===== */

/* Kills the session's processes (answering what they owe), ends its backend, removes its files. */
static void session_close(session *s) {
  if (s->closing) return;
  s->closing = true;
  session_remove(s);
  archives_close_session(s);
  procs_close_session(s);
  if (s->backend) s->backend->close(s);
  disk_watch_close(s);
  session_free(s);
}

void sessions_close_all(void) {
  while (session_first()) session_close(session_first());
  root_remove();
}

void method_close(request *r, const cJSON *params) {
  /* The original sends the session object itself; {"session": {...}} is accepted too. */
  const cJSON *obj = cJSON_GetObjectItemCaseSensitive(params, "session");
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(obj) ? obj : params, "id");
  if (!cJSON_IsString(id)) { reply_error(r, "invalid_request", "close: params must be the session object (with its `id`)"); return; }
  session *s = session_find(id->valuestring);
  if (!s) { reply_error(r, "unknown_session", "close: no open session `%s`", id->valuestring); return; }
  session_close(s);
  reply_result(r, cJSON_CreateObject());
}

/* ===== open ===== */

static const profile *find_profile(const cJSON *params, failure *f) {
  const cJSON *ref = NULL;
  const char *provider = "auto", *name = "default";
  if (!param_object(params, "profile", &ref, f) ||
      !param_string(ref, "provider", true, &provider, f) || !param_string(ref, "name", true, &name, f))
    return NULL;
  const profile *p = profile_find(provider, name);
  if (!p) fail(f, "invalid_request", "open: unknown profile `%s/%s` (see `describe` for the known ones)", provider, name);
  return p;
}

/*
** Runs the backend's open. An automatic profile takes bubblewrap when the
** probe says it works here, and the local backend otherwise or when the
** sandbox fails to start; every other profile fails closed.
*/
static bool open_backend(session *s, failure *f) {
  bool automatic = s->profile->automatic;
  bool namespaces = s->profile->isolation == ISOLATION_NAMESPACES || (automatic && bwrap_usable(NULL));
  const char *code = "internal";
  char msg[sizeof f->message] = "";
  s->backend = namespaces ? &backend_bwrap : &backend_local;
  if (s->backend->open(s, &code, msg, sizeof msg) == 0) return true;
  s->backend = NULL;
  if (automatic && namespaces) {
    fprintf(stderr, "smolwf-provider: %s: %s; using local/default\n", s->profile->name, msg);
    s->backend = &backend_local;
    if (backend_local.open(s, &code, msg, sizeof msg) == 0) return true;
    s->backend = NULL;
  }
  return fail(f, code, "open: profile `%s`: %s", s->profile->name, msg);
}

/* The session's cwd: relative to the workspace, and it must be a directory. */
static bool set_cwd(session *s, const cJSON *params, failure *f) {
  const char *cwd = NULL;
  if (!param_string(params, "cwd", true, &cwd, f)) return false;
  s->cwd_view = strdup(s->workspace_view);
  if (!cwd) return true;
  resolved p;
  if (!path_resolve(s, "open: cwd", cwd, &p, f)) return false;
  int fd = path_open(&p, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) return fail_errno(f, -fd, "open: cwd", cwd);
  close(fd);
  free(s->cwd_view);
  s->cwd_view = strdup(p.view);
  return true;
}

static cJSON *session_object(const session *s) {
  cJSON *obj = cJSON_CreateObject();
  cJSON_AddStringToObject(obj, "id", s->id);
  cJSON_AddStringToObject(obj, "cwd", s->cwd_view);
  cJSON_AddItemToObject(obj, "capabilities", capabilities_of(s));
  cJSON_AddStringToObject(obj, "profile", s->profile->name);
  return obj;
}

/* Adds the directory open at fd, or else the one at path, to ids. */
static void add_skip(file_id **ids, size_t *n, int fd, const char *path) {
  struct stat st;
  if (fd >= 0 ? fstat(fd, &st) < 0 : !path || stat(path, &st) < 0) return;
  file_id *grown = realloc(*ids, (*n + 1) * sizeof **ids);
  if (!grown) abort();
  *ids = grown;
  (*ids)[(*n)++] = (file_id){st.st_dev, st.st_ino};
}

/*
** A workspace may contain the provider's own root (host_path "/tmp", or
** $XDG_RUNTIME_DIR inside the workspace): copying the root would copy the
** new session into itself until the depth limit. So the root and every
** session's directory (the new one included, for a host_path inside the
** root) are left out of the copy.
*/
static bool copy_workspace(session *s, const char *host_path, failure *f) {
  file_id *skip = NULL;
  size_t nskip = 0;
  add_skip(&skip, &nskip, root_fd(), NULL);
  add_skip(&skip, &nskip, -1, s->root);
  for (session *o = session_first(); o; o = o->next) add_skip(&skip, &nskip, -1, o->root);
  bool ok = workspace_copy(host_path, s->workspace_fd, skip, nskip, f);
  free(skip);
  return ok;
}

static bool open_session(session *s, const cJSON *params, failure *f) {
  const cJSON *sync = NULL;
  const char *host_path = NULL;
  if (!param_object(params, "workspace_sync", &sync, f) || !param_string(sync, "host_path", true, &host_path, f))
    return false;
  if (!copy_workspace(s, host_path, f)) return false;
  disk_watch_open(s);
  return open_backend(s, f) && set_cwd(s, params, f);
}

void method_open(request *r, const cJSON *params) {
  failure f;
  const profile *prof = find_profile(params, &f);
  session *s = prof ? session_new(prof, &f) : NULL;
  if (!s) { reply_failure(r, &f); return; }
  if (!open_session(s, params, &f)) {
    if (s->backend) s->backend->close(s);
    disk_watch_close(s);
    session_free(s);
    reply_failure(r, &f);
    return;
  }
  session_add(s);
  reply_result(r, session_object(s));
}
