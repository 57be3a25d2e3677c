/*
** Opening sessions (see opening.h).
*/
#define _GNU_SOURCE
#include "opening.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bwrap_probe.h"
#include "capabilities.h"
#include "context.h"
#include "discard.h"
#include "disk_cap.h"
#include "job.h"
#include "params.h"
#include "paths.h"
#include "root.h"
#include "tree.h"
#include "workspace.h"
#include "workspace_plan.h"

/* An open that has run this long starts sending progress events, then every PROGRESS_EVERY_MS. */
#define PROGRESS_AFTER_MS 1000
#define PROGRESS_EVERY_MS 500

typedef struct opening {
  request *r;
  session *s;               /* NULL while the open waits for the bwrap probe */
  unsigned long serial;     /* names the opening to the probe's callback, which may outlive it */
  cJSON *params;            /* the open's params, kept while it waits for the probe */
  session *parent;          /* a fork's, while its copy reads the parent's files */
  excludes excludes;
  char *cwd;                /* asked for (relative to the workspace), or the parent's for a fork */
  bool progress;            /* the client asked for progress events */
  const char *phase;        /* what progress events say is going on */
  workspace_plan plan;      /* what the jobs copy and hide */
  bool skips_listed;
  job *job;
  copy_outcome copied, tmp_copied, hidden;
  uint64_t files, bytes;    /* what the jobs did, summed */
  uv_timer_t progress_timer;
  bool cancelled;
  request *close_req;       /* a close that cancelled the open: answered once the files are gone */
  bool fell_back;           /* an automatic profile went from bwrap to local */
  struct opening *next;
} opening;

typedef struct openings {
  opening *first;
  unsigned long next_serial;
} openings;

static openings *table(void) {
  return CTX_PART(openings);
}

static void begin_backend(opening *o);
static void finish(opening *o);

/* ====================================================== ending */

static void unlink_opening(opening *o) {
  for (opening **pp = &table()->first; *pp; pp = &(*pp)->next)
    if (*pp == o) { *pp = o->next; return; }
}

static void free_timer(uv_handle_t *h) {
  free(h->data);
}

/* A fork's copy is over (or never ran): its parent goes now if it was closed meanwhile. */
static void release_parent(opening *o) {
  session *parent = o->parent;
  if (!parent) return;
  o->parent = NULL;
  session_release(parent);
}

/* Frees o; its session and request were taken or answered already. */
static void opening_free(opening *o) {
  release_parent(o);
  unlink_opening(o);
  workspace_plan_free(&o->plan);
  free(o->cwd);
  cJSON_Delete(o->params);
  copy_outcome_clear(&o->copied);
  copy_outcome_clear(&o->tmp_copied);
  copy_outcome_clear(&o->hidden);
  o->progress_timer.data = o;
  uv_close((uv_handle_t *)&o->progress_timer, free_timer);
}

/* The open failed (or was cancelled): nothing of the session is left, its request gets f. */
static void abandon(opening *o, const failure *f) {
  session *s = o->s;
  if (s->backend && s->backend_data) s->backend->close(s);
  disk_watch_close(s);
  session_discard(s, o->r, f, o->close_req);   /* both answered once nothing is left on disk */
  opening_free(o);
}

/* The method the opening answers: "open", or "fork". */
static const char *method_of(const opening *o) {
  return o->r ? o->r->method : "open";
}

static void cancelled_failure(failure *f, const opening *o) {
  fail(f, "unknown_session", "%s: session `%s` was closed while it opened", method_of(o), o->s->id);
}

/* ====================================================== progress */

static void on_progress(uv_timer_t *t) {
  opening *o = t->data;
  if (!o->progress || !o->r || !o->s) return;
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", "progress");
  cJSON_AddStringToObject(ev, "session", o->s->id);
  cJSON_AddStringToObject(ev, "phase", o->phase);
  uint64_t files = o->files, bytes = o->bytes;
  if (o->job) { files += atomic_load(&o->job->files); bytes += atomic_load(&o->job->bytes); }
  cJSON_AddNumberToObject(ev, "files", (double)files);
  cJSON_AddNumberToObject(ev, "bytes", (double)bytes);
  send_event(o->r, ev);
}

/* ====================================================== jobs */

static int dir_fd(int fd) {
  return openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* One copy of the prepare or fill job, into dst_fd (an O_PATH fd: opened for reading here). */
static void copy_tree(opening *o, job *j, int from_fd, int into_fd, const char *label, bool layer, copy_outcome *out) {
  int dst = dir_fd(into_fd);
  const workspace_plan *p = &o->plan;
  copy_spec spec = {.src_fd = from_fd, .src_label = label, .dst_fd = dst, .skip = p->skip, .nskip = p->nskip,
                    .excludes = layer ? NULL : &p->excludes, .skip_cache_dirs = !layer,
                    .overlay_layer = layer, .job = j, .pace_ms = p->pace_ms};
  if (dst < 0) { memset(out, 0, sizeof *out); fail_errno(&out->f, errno, "opening session directory", label); }
  else workspace_copy(&spec, out);
  if (dst >= 0) close(dst);
}

/* On the job's thread: the prepare step's copies and hiding. */
static void prepare_work(job *j) {
  opening *o = j->data;
  session *s = o->s;
  const char *label = s->ws.host_path ? s->ws.host_path : "the parent session's workspace";
  const workspace_plan *p = &o->plan;
  o->copied.ok = o->tmp_copied.ok = o->hidden.ok = true;
  if (p->copy_from_fd >= 0) copy_tree(o, j, p->copy_from_fd, s->written_fd, label, p->copy_layer, &o->copied);
  if (o->copied.ok && p->tmp_from_fd >= 0)
    copy_tree(o, j, p->tmp_from_fd, s->tmp_fd, "the parent session's tmp", p->copy_layer, &o->tmp_copied);
  if (!o->copied.ok || s->ws.kind != WORKSPACE_OVERLAY || !s->ws.host_path || p->copy_layer) return;
  int lower = open(s->ws.host_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), upper = dir_fd(s->written_fd);
  copy_spec spec = {.src_fd = lower, .src_label = s->ws.host_path, .dst_fd = upper, .excludes = &p->excludes, .job = j};
  if (lower >= 0 && upper >= 0) {
    workspace_hide(&spec, &o->hidden);
    if (o->hidden.ok && p->hide_root) o->hidden.ok = workspace_hide_path(lower, upper, p->hide_root, &o->hidden.f);
  } else {
    fail_errno(&o->hidden.f, errno, "workspace_sync.host_path", s->ws.host_path);
    o->hidden.ok = false;
  }
  if (lower >= 0) close(lower);
  if (upper >= 0) close(upper);
}

/* The first failure of the job's steps, or NULL. */
static const failure *job_failure(const opening *o) {
  if (!o->copied.ok) return &o->copied.f;
  if (!o->tmp_copied.ok) return &o->tmp_copied.f;
  if (!o->hidden.ok) return &o->hidden.f;
  return NULL;
}

/* f named after the method, as the request's other errors are ("fork: ..."); the copy does not know it. */
static void with_method(failure *out, const failure *f, const opening *o) {
  const char *method = method_of(o);
  size_t n = strlen(method);
  if (strncmp(f->message, method, n) == 0 && f->message[n] == ':') *out = *f;
  else fail(out, f->code, "%s: %s", method, f->message);
}

static void job_ended(job *j, void (*next)(opening *)) {
  opening *o = j->data;
  o->job = NULL;
  release_parent(o);
  o->files += atomic_load(&j->files);
  o->bytes += atomic_load(&j->bytes);
  failure f;
  if (o->cancelled) { cancelled_failure(&f, o); abandon(o, &f); return; }
  const failure *bad = job_failure(o);
  if (bad) { with_method(&f, bad, o); abandon(o, &f); return; }
  next(o);
}

static void prepared(job *j) {
  job_ended(j, begin_backend);
}

static void filled(job *j) {
  job_ended(j, finish);
}

/* Runs work as o's job, then `done` on the loop. False (o abandoned) when no thread can be made. */
static bool run_job(opening *o, const char *phase, job_work_fn work, job_done_fn done) {
  o->phase = phase;
  o->job = job_start(provider_ctx()->loop, work, done, o);
  if (o->job) return true;
  failure f;
  fail(&f, "limit_exceeded", "%s: cannot start a thread to copy the workspace: %s", method_of(o), strerror(errno));
  abandon(o, &f);
  return false;
}

/*
** A workspace may contain the provider's own root (host_path "/tmp", or
** $XDG_RUNTIME_DIR inside it): copying it would copy the new session
** into itself. So the root and every session's directory (the new one
** included, for a host_path inside the root) are left out, by identity;
** listed here, on the loop, where the sessions are.
*/
static void list_skips(opening *o) {
  if (o->skips_listed) return;
  o->skips_listed = true;
  workspace_plan *p = &o->plan;
  workspace_plan_skip(p, root_fd(), NULL);
  workspace_plan_skip(p, -1, o->s->root);
  for (session *other = session_first(); other; other = other->next) workspace_plan_skip(p, -1, other->root);
  for (opening *other = table()->first; other; other = other->next)
    if (other->s) workspace_plan_skip(p, -1, other->s->root);
}

static void begin_prepare(opening *o) {
  if (!workspace_plan_has_work(&o->plan, o->s)) { begin_backend(o); return; }
  list_skips(o);
  run_job(o, o->plan.copy_from_fd >= 0 ? "copy" : "hide", prepare_work, prepared);
}

/* ====================================================== the backend */

/* Removes what hiding put into the upper directory (whiteouts mean nothing without an overlay). 0 or -errno. */
static int empty_upper(int upper_fd) {
  int fd = dir_fd(upper_fd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    int err = -errno;
    if (fd >= 0) close(fd);
    return err;
  }
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    int removed = tree_remove(dirfd(d), e->d_name);
    if (rc == 0) rc = removed;
  }
  closedir(d);
  return rc;
}

/* The copy into the upper directory, after the kernel refused the overlay. */
static void fill_work(job *j) {
  opening *o = j->data;
  o->copied.ok = o->tmp_copied.ok = o->hidden.ok = true;
  int emptied = empty_upper(o->s->written_fd);
  if (emptied < 0) {   /* a whiteout left there would turn up in the workspace as a device file */
    o->copied.ok = fail_errno(&o->copied.f, -emptied, "open: emptying the workspace before the copy in", o->s->root);
    return;
  }
  copy_tree(o, j, o->plan.copy_from_fd, o->s->written_fd, o->s->ws.host_path, false, &o->copied);
}

static void begin_fill(opening *o) {
  list_skips(o);
  o->plan.copy_from_fd = open(o->s->ws.host_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o->plan.copy_from_fd < 0) {
    failure f;
    fail_errno(&f, errno, "open: workspace_sync.host_path", o->s->ws.host_path);
    abandon(o, &f);
    return;
  }
  run_job(o, "copy", fill_work, filled);
}

/* An automatic profile whose sandbox did not start: a local session, with a copy if it had an overlay. */
static bool fall_back(opening *o, const failure *f) {
  session *s = o->s;
  if (!s->profile->automatic || s->backend != &backend_bwrap || o->fell_back) return false;
  fprintf(stderr, "smolwf-provider: %s: %s; using local/default\n", s->profile->name, f->message);
  s->backend->close(s);
  session_discard_sandbox(s);   /* the failed sandbox ends meanwhile, off the loop */
  s->backend = &backend_local;
  o->fell_back = true;
  if (s->ws.kind == WORKSPACE_OVERLAY) {
    s->ws.kind = WORKSPACE_COPY;
    begin_fill(o);   /* then finish: the local backend opens at once, in finish */
    return true;
  }
  begin_backend(o);
  return true;
}

/*
** A sandbox that could not even start for its overlay (a setuid bwrap
** refuses --cap-add, say) is started again without one, and the tree
** copied in: an overlay is an optimisation, never a reason to fail.
*/
static bool retry_without_overlay(opening *o, const failure *f) {
  session *s = o->s;
  if (s->backend != &backend_bwrap || s->ws.kind != WORKSPACE_OVERLAY) return false;
  fprintf(stderr, "smolwf-provider: session %s: %s; trying again without an overlay\n", s->id, f->message);
  s->backend->close(s);
  session_discard_sandbox(s);
  s->ws.kind = WORKSPACE_COPY;
  s->ws.overlay_refused = -EPERM;
  begin_backend(o);
  return true;
}

void backend_opened(session *s, const failure *f) {
  opening *o = NULL;
  for (opening *it = table()->first; it && !o; it = it->next) if (it->s && it->s == s) o = it;
  if (!o) return;
  failure why;
  if (o->cancelled) { cancelled_failure(&why, o); abandon(o, &why); return; }
  if (f && (retry_without_overlay(o, f) || fall_back(o, f))) return;
  if (f) { fail(&why, f->code, "open: profile `%s`: %s", s->profile->name, f->message); abandon(o, &why); return; }
  if (s->ws.overlay_refused && o->plan.copy_from_fd < 0 && !o->plan.copy_layer) { begin_fill(o); return; }
  finish(o);
}

static void begin_backend(opening *o) {
  session *s = o->s;
  o->phase = "sandbox";
  disk_watch_open(s);
  failure f;
  int rc = s->backend->open(s, &f);
  if (rc == 0) return;   /* backend_opened follows */
  if (rc < 0) s->backend = NULL;   /* a failed open cleaned up after itself */
  backend_opened(s, rc < 0 ? &f : NULL);
}

/* ====================================================== done */

/* The session's cwd: relative to the workspace (or a fork's parent's, as it is), and it must be a directory. */
static bool set_cwd(opening *o, failure *f) {
  session *s = o->s;
  free(s->cwd_view);
  s->cwd_view = strdup(s->workspace_view);
  if (!o->cwd) return true;
  resolved p;
  if (!path_resolve(s, "open: cwd", o->cwd, &p, f)) return false;
  int fd = path_open(&p, O_PATH | O_DIRECTORY, 0);
  if (fd < 0) return fail_errno(f, -fd, "open: cwd", o->cwd);
  close(fd);
  free(s->cwd_view);
  s->cwd_view = strdup(p.view);
  return true;
}

/* The mechanism the session got, as capabilities.workspace names it. */
static const char *mechanism(const opening *o) {
  switch (o->s->ws.kind) {
    case WORKSPACE_EMPTY: return o->plan.copy_from_fd >= 0 ? (o->copied.cloned ? "reflink" : "copy") : "empty";
    case WORKSPACE_COPY: return o->copied.cloned && o->files > 0 ? "reflink" : "copy";
    case WORKSPACE_OVERLAY: return "overlay";
    case WORKSPACE_BIND: return "bind";
    case WORKSPACE_RO: return "ro";
  }
  return "empty";
}

static void add_warnings(cJSON *ws, const copy_outcome *c) {
  cJSON *list = cJSON_GetObjectItem(ws, "warnings");
  for (uint64_t i = 0; i < c->skipped && i < COPY_WARNINGS_KEPT; i++)
    if (c->warnings[i]) cJSON_AddItemToArray(list, cJSON_CreateString(c->warnings[i]));
}

/* What open did to make the workspace: the mechanism, what it moved, and what it skipped. */
static cJSON *workspace_object(const opening *o) {
  cJSON *ws = cJSON_CreateObject();
  cJSON_AddStringToObject(ws, "mechanism", o->s->ws.mechanism);
  cJSON_AddNumberToObject(ws, "files", (double)o->files);
  cJSON_AddNumberToObject(ws, "bytes", (double)o->bytes);
  cJSON_AddNumberToObject(ws, "skipped", (double)(o->copied.skipped + o->tmp_copied.skipped));
  cJSON_AddItemToObject(ws, "warnings", cJSON_CreateArray());
  add_warnings(ws, &o->copied);
  add_warnings(ws, &o->tmp_copied);
  if (o->s->ws.overlay_refused)
    cJSON_AddStringToObject(ws, "overlay_refused", strerror(-o->s->ws.overlay_refused));
  return ws;
}

static cJSON *session_object(const opening *o) {
  const session *s = o->s;
  cJSON *obj = cJSON_CreateObject();
  cJSON_AddStringToObject(obj, "id", s->id);
  cJSON_AddStringToObject(obj, "cwd", s->cwd_view);
  cJSON_AddItemToObject(obj, "capabilities", capabilities_of(s));
  cJSON_AddStringToObject(obj, "profile", s->profile->name);
  cJSON_AddItemToObject(obj, "workspace", workspace_object(o));
  return obj;
}

static void finish(opening *o) {
  session *s = o->s;
  failure f;
  if (o->fell_back && !s->backend_data && s->backend->open(s, &f) < 0) { s->backend = NULL; abandon(o, &f); return; }
  if (!set_cwd(o, &f)) { abandon(o, &f); return; }
  s->ws.mechanism = mechanism(o);
  session_add(s);
  reply_result(o->r, session_object(o));
  o->r = NULL;
  opening_free(o);
}

/* ====================================================== planning */

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

static bool uses_namespaces(const profile *p) {
  return p->isolation == ISOLATION_NAMESPACES || (p->automatic && bwrap_usable(NULL));
}

static opening *opening_new(request *r, session *s) {
  opening *o = calloc(1, sizeof *o);
  if (!o) abort();
  o->r = r;
  o->s = s;
  workspace_plan_init(&o->plan);
  o->serial = ++table()->next_serial;
  o->phase = "plan";
  uv_timer_init(provider_ctx()->loop, &o->progress_timer);
  o->progress_timer.data = o;
  uv_timer_start(&o->progress_timer, on_progress, PROGRESS_AFTER_MS, PROGRESS_EVERY_MS);
  o->next = table()->first;
  table()->first = o;
  return o;
}

/* The rest of open, once the profile's backend is known (the probe has run, if it must). */
static void plan_open(opening *o, const cJSON *params, const profile *prof) {
  failure f;
  session *s = session_new(prof, &f);
  if (!s) { reply_failure(o->r, &f); o->r = NULL; opening_free(o); return; }
  o->s = s;
  bool namespaces = uses_namespaces(prof);
  s->backend = namespaces ? &backend_bwrap : &backend_local;
  const char *cwd = NULL;
  param_bool(params, "progress", &o->progress, &f);
  if (!param_string(params, "cwd", true, &cwd, &f) || !workspace_plan_open(&o->plan, s, params, namespaces, &f)) {
    s->backend = NULL;
    abandon(o, &f);
    return;
  }
  if (cwd) o->cwd = strdup(cwd);
  begin_prepare(o);
}

static opening *find_serial(unsigned long serial) {
  for (opening *o = table()->first; o; o = o->next) if (o->serial == serial) return o;
  return NULL;
}

/* The probe has run: the opening goes on, unless the provider gave up on it meanwhile. */
static void after_probe(void *data) {
  opening *o = find_serial((unsigned long)(uintptr_t)data);
  if (!o) return;
  cJSON *params = o->params;
  o->params = NULL;
  const profile *prof = find_profile(params, &(failure){0});
  plan_open(o, params, prof);
  cJSON_Delete(params);
}

static bool needs_probe(const profile *p) {
  return p->isolation == ISOLATION_NAMESPACES || p->automatic;
}

void method_open(request *r, const cJSON *params) {
  failure f;
  const profile *prof = find_profile(params, &f);
  if (!prof) { reply_failure(r, &f); return; }
  opening *o = opening_new(r, NULL);
  if (!needs_probe(prof) || bwrap_probed()) { plan_open(o, params, prof); return; }
  /* The first bwrap open runs the probe, off the loop: later requests are served meanwhile. */
  o->params = cJSON_Duplicate(params, true);
  o->phase = "probe";
  bwrap_probe_then(after_probe, (void *)(uintptr_t)o->serial);
}

/* ====================================================== fork */

/* The parent's cwd relative to its workspace (a local session's views are host paths), NULL for the top. */
static char *cwd_in_workspace(const session *parent) {
  size_t n = strlen(parent->workspace_view);
  const char *cwd = parent->cwd_view;
  if (strncmp(cwd, parent->workspace_view, n) != 0 || (cwd[n] != '/' && cwd[n] != '\0')) return strdup(cwd);
  return cwd[n] && cwd[n + 1] ? strdup(cwd + n + 1) : NULL;
}

void method_fork(request *r, session *parent, const cJSON *params) {
  failure f;
  session *s = session_new(parent->profile, &f);
  if (!s) { reply_failure(r, &f); return; }
  opening *o = opening_new(r, s);
  o->parent = parent;
  session_hold(parent);
  s->backend = parent->backend;
  param_bool(params, "progress", &o->progress, &f);
  if (!workspace_plan_fork(&o->plan, s, parent, &f)) { s->backend = NULL; abandon(o, &f); return; }
  o->cwd = cwd_in_workspace(parent);
  begin_prepare(o);
}

/* ====================================================== cancelling */

static void cancel(opening *o, request *close_req) {
  failure f;
  o->cancelled = true;
  if (close_req) {
    if (o->close_req) reply_result(close_req, cJSON_CreateObject());   /* a second close */
    else o->close_req = close_req;
  }
  if (o->job) { job_cancel(o->job); return; }   /* its end abandons o */
  cancelled_failure(&f, o);
  abandon(o, &f);   /* waiting for HELLO: the backend's close ends the sandbox */
}

bool opening_cancel(const char *id, request *r) {
  for (opening *o = table()->first; o; o = o->next)
    if (o->s && strcmp(o->s->id, id) == 0) { cancel(o, r); return true; }
  return false;
}

void openings_cancel_all(void) {
  while (table()->first) {
    opening *o = table()->first;
    if (!o->s) {   /* still waiting for the probe: nothing made yet */
      reply_error(o->r, "unknown_session", "open: the provider stopped before the session was opened");
      o->r = NULL;
      opening_free(o);
    } else if (o->job) {
      o->cancelled = true;
      job_finish_now(o->job);   /* its end abandons o */
    } else {
      cancel(o, NULL);
    }
  }
  bwrap_probe_cancel();   /* its waiters are gone: nothing opens after this */
  discards_finish();
  free(provider_ctx()->openings);
  provider_ctx()->openings = NULL;
}
