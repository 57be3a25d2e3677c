/*
** Sessions: open (private root, workspace copy, backend, cwd), close,
** shutdown, describe, and the provider's root directory that holds every
** session's files.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bwrap_probe.h"
#include "disk_cap.h"
#include "group_wait.h"
#include "methods.h"
#include "paths.h"
#include "process.h"
#include "workspace.h"

static session *sessions;
static unsigned long next_session;
static char *provider_root;
static int provider_root_fd = -1;

/* ===== the provider's root ===== */

static const char *runtime_base(void) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  struct stat st;
  if (xdg && *xdg == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && access(xdg, W_OK | X_OK) == 0)
    return xdg;
  return "/tmp";
}

/*
** A provider killed by SIGKILL cannot remove its root. Every root is named
** after its provider's pid and locked (flock) for the provider's whole
** life, so the next provider can tell an abandoned one: its lock can be
** taken. The lock alone would do but for the moment between a root's
** mkdtemp and its flock, so a root whose pid is alive is also left alone
** while it is younger than FRESH_ROOT_SECONDS; older, its pid was reused
** (pid_max is often 32768) and it is swept too. Roots of live providers,
** and roots of other layouts, are never touched.
*/
#define FRESH_ROOT_SECONDS 60

static bool abandoned_root(int base_fd, const char *name, int *fd) {
  long pid;
  int end = 0;
  /* "smolwf-provider.PID.XXXXXX", as session_provider_root() names them */
  if (sscanf(name, "smolwf-provider.%ld.%n", &pid, &end) != 1 || end == 0 || strlen(name + end) != 6 || pid <= 0)
    return false;
  *fd = openat(base_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (*fd < 0 || fstat(*fd, &st) != 0 || st.st_uid != geteuid()) return false;
  bool pid_alive = kill((pid_t)pid, 0) == 0 || errno != ESRCH;
  if (pid_alive && time(NULL) - st.st_mtime < FRESH_ROOT_SECONDS) return false;
  return flock(*fd, LOCK_EX | LOCK_NB) == 0;
}

static void sweep_abandoned_roots(const char *base) {
  DIR *d = opendir(base);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    int fd = -1;
    if (abandoned_root(dirfd(d), e->d_name, &fd)) tree_remove(dirfd(d), e->d_name);
    if (fd >= 0) close(fd);
  }
  closedir(d);
}

const char *session_provider_root(void) {
  if (provider_root) return provider_root;
  const char *base = runtime_base();
  sweep_abandoned_roots(base);
  char tmpl[PATH_MAX];
  snprintf(tmpl, sizeof tmpl, "%s/smolwf-provider.%ld.XXXXXX", base, (long)getpid());
  if (!mkdtemp(tmpl)) return NULL;   /* mkdtemp makes it 0700 */
  provider_root_fd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (provider_root_fd < 0 || flock(provider_root_fd, LOCK_EX | LOCK_NB) < 0) {
    if (provider_root_fd >= 0) close(provider_root_fd);
    rmdir(tmpl);
    return NULL;
  }
  provider_root = strdup(tmpl);
  return provider_root;
}

static void remove_provider_root(void) {
  if (!provider_root) return;
  close(provider_root_fd);
  int rc = tree_remove(AT_FDCWD, provider_root);
  if (rc < 0) fprintf(stderr, "smolwf-provider: removing %s: %s\n", provider_root, strerror(-rc));
  free(provider_root);
  provider_root = NULL;
}

/* ===== session list ===== */

session *session_first(void) {
  return sessions;
}

session *session_find(const char *id) {
  for (session *s = sessions; s; s = s->next)
    if (strcmp(s->id, id) == 0) return s;
  return NULL;
}

void session_add_group(session *s, pid_t pgid) {
  if (s->ngroups == s->groups_cap) {
    size_t cap = s->groups_cap ? 2 * s->groups_cap : 16;
    pid_t *groups = realloc(s->groups, cap * sizeof *groups);
    if (groups != NULL) s->groups = groups;
    bool *reaped = groups != NULL ? realloc(s->group_reaped, cap * sizeof *reaped) : NULL;
    if (reaped == NULL) abort();   /* out of memory: a group we could not track must not run */
    s->group_reaped = reaped;
    s->groups_cap = cap;
  }
  s->group_reaped[s->ngroups] = false;
  s->groups[s->ngroups++] = pgid;
}

void session_group_leader_reaped(session *s, pid_t pgid) {
  for (size_t i = 0; i < s->ngroups; i++) {
    if (s->groups[i] != pgid || s->group_reaped[i]) continue;
    if (kill(-pgid, 0) < 0 && errno == ESRCH) {   /* empty: its number may be reused from now on */
      s->ngroups--;
      s->groups[i] = s->groups[s->ngroups];
      s->group_reaped[i] = s->group_reaped[s->ngroups];
    } else {
      s->group_reaped[i] = true;
    }
    return;
  }
}

static void unlink_session(session *s) {
  for (session **pp = &sessions; *pp; pp = &(*pp)->next)
    if (*pp == s) { *pp = s->next; return; }
}

static void session_free(session *s) {
  disk_watch_close(s);
  if (s->workspace_fd >= 0) close(s->workspace_fd);
  if (s->tmp_fd >= 0) close(s->tmp_fd);
  if (s->root) {
    int rc = tree_remove(provider_root_fd, s->id);
    if (rc < 0) fprintf(stderr, "smolwf-provider: removing %s: %s\n", s->root, strerror(-rc));
  }
  free(s->id); free(s->root); free(s->workspace_host); free(s->tmp_host);
  free(s->workspace_view); free(s->tmp_view); free(s->cwd_view);
  free(s->groups);
  free(s->group_reaped);
  free(s);
}

void session_close(session *s) {
  if (s->closing) return;
  s->closing = true;
  unlink_session(s);
  procs_close_session(s);
  if (s->backend) s->backend->close(s);
  session_free(s);
}

void session_close_all(void) {
  while (sessions) session_close(sessions);
  remove_provider_root();
}

/* ===== open ===== */

static int make_area(const char *root, const char *name, char **host_path) {
  char path[PATH_MAX];
  path_join(path, root, name);
  if (mkdir(path, 0700) < 0) return -1;
  *host_path = strdup(path);
  return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* The session's private directories: <provider root>/<id>/{workspace,tmp}. */
static session *session_create(failure *f) {
  const char *base = session_provider_root();
  if (!base) { fail_errno(f, errno, "open: creating the provider's root directory under", runtime_base()); return NULL; }
  session *s = calloc(1, sizeof *s);
  char id[32], root[PATH_MAX];
  snprintf(id, sizeof id, "s%lu", ++next_session);
  path_join(root, base, id);
  s->id = strdup(id);
  s->workspace_fd = s->tmp_fd = -1;
  s->loop = uv_default_loop();   /* the one loop the provider runs (main.c) */
  if (mkdir(root, 0700) < 0) { fail_errno(f, errno, "open: creating", root); free(s->id); free(s); return NULL; }
  s->root = strdup(root);
  s->workspace_fd = make_area(root, "workspace", &s->workspace_host);
  s->tmp_fd = s->workspace_fd < 0 ? -1 : make_area(root, "tmp", &s->tmp_host);
  if (s->tmp_fd < 0) { fail_errno(f, errno, "open: creating session directories in", root); session_free(s); return NULL; }
  return s;
}

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

static cJSON *capabilities(const session *s) {
  cJSON *caps = cJSON_CreateObject();
  static const char *const flags[] = {"exec", "process", "timeout", "signal", "output_limit", "fs_extra", "describe"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) cJSON_AddTrueToObject(caps, flags[i]);
  cJSON_AddStringToObject(caps, "isolation", s->backend->isolation);
  /* Without namespaces nothing stops a command from reaching the network. */
  bool network = strcmp(s->backend->isolation, "none") == 0 || s->profile->network;
  cJSON_AddBoolToObject(caps, "network", network);
  return caps;
}

static cJSON *session_object(const session *s) {
  cJSON *obj = cJSON_CreateObject();
  cJSON_AddStringToObject(obj, "id", s->id);
  cJSON_AddStringToObject(obj, "cwd", s->cwd_view);
  cJSON_AddItemToObject(obj, "capabilities", capabilities(s));
  cJSON_AddStringToObject(obj, "profile", s->profile->name);
  return obj;
}

/* Adds the directory open at fd, or else the one at path, to ids. */
static void add_skip(file_id **ids, size_t *n, int fd, const char *path) {
  struct stat st;
  if (fd >= 0 ? fstat(fd, &st) < 0 : !path || stat(path, &st) < 0) return;
  *ids = realloc(*ids, (*n + 1) * sizeof **ids);
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
  add_skip(&skip, &nskip, provider_root_fd, NULL);
  add_skip(&skip, &nskip, -1, s->root);
  for (session *o = sessions; o; o = o->next) add_skip(&skip, &nskip, -1, o->root);
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
  session *s = prof ? session_create(&f) : NULL;
  if (!s) { reply_failure(r, &f); return; }
  s->profile = prof;
  if (!open_session(s, params, &f)) {
    if (s->backend) s->backend->close(s);
    session_free(s);
    reply_failure(r, &f);
    return;
  }
  s->next = sessions;
  sessions = s;
  reply_result(r, session_object(s));
}

/* ===== close, shutdown, describe ===== */

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

void method_shutdown(request *r, const cJSON *params) {
  (void)params;
  server_stop(r);
}

/* What a session of p would enforce here: an automatic profile says what it would pick. */
static bool enforces_namespaces(const profile *p) {
  return p->isolation == ISOLATION_NAMESPACES || (p->automatic && bwrap_usable(NULL));
}

void method_describe(request *r, const cJSON *params) {
  (void)params;
  size_t n;
  const profile *all = profiles_all(&n);
  cJSON *list = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", all[i].name);
    bool namespaces = enforces_namespaces(&all[i]);
    cJSON_AddStringToObject(p, "isolation", namespaces ? "namespaces" : "none");
    cJSON_AddBoolToObject(p, "network", all[i].network || !namespaces);
    cJSON_AddItemToArray(list, p);
  }
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "provider", "smolwf-provider");
  cJSON_AddStringToObject(result, "version", SMOLWF_VERSION);
  cJSON_AddItemToObject(result, "profiles", list);
  cJSON_AddNumberToObject(result, "protocol", 1);
  reply_result(r, result);
}
