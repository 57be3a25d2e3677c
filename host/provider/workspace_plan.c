/*
** Planning a session's workspace (see workspace_plan.h).
*/
#define _GNU_SOURCE
#include "workspace_plan.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bwrap_args.h"
#include "params.h"
#include "root.h"

void workspace_plan_init(workspace_plan *p) {
  memset(p, 0, sizeof *p);
  p->copy_from_fd = p->tmp_from_fd = -1;
  const char *pace = getenv("SMOLWF_PROVIDER_COPY_PACE_MS");
  p->pace_ms = pace ? (unsigned)strtoul(pace, NULL, 10) : 0;
}

void workspace_plan_free(workspace_plan *p) {
  excludes_free(&p->excludes);
  free(p->hide_root);
  free(p->skip);
  if (p->copy_from_fd >= 0) close(p->copy_from_fd);
  if (p->tmp_from_fd >= 0) close(p->tmp_from_fd);
  p->copy_from_fd = p->tmp_from_fd = -1;
  p->hide_root = NULL;
  p->skip = NULL;
}

void workspace_plan_skip(workspace_plan *p, int fd, const char *path) {
  struct stat st;
  if (fd >= 0 ? fstat(fd, &st) < 0 : !path || stat(path, &st) < 0) return;
  file_id *grown = realloc(p->skip, (p->nskip + 1) * sizeof *grown);
  if (!grown) abort();
  p->skip = grown;
  p->skip[p->nskip++] = (file_id){st.st_dev, st.st_ino};
}

bool workspace_plan_has_work(const workspace_plan *p, const session *s) {
  return p->copy_from_fd >= 0 || p->tmp_from_fd >= 0 ||
         (s->ws.kind == WORKSPACE_OVERLAY && (p->excludes.n > 0 || p->hide_root));
}

/* ====================================================== open */

static bool parse_excludes(workspace_plan *p, const cJSON *sync, failure *f) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(sync, "exclude");
  if (!list || cJSON_IsNull(list)) return true;
  if (!cJSON_IsArray(list)) return fail(f, "invalid_request", "open: `workspace_sync.exclude` must be an array of patterns");
  int i = 0;
  for (const cJSON *it = list->child; it; it = it->next, i++) {
    const char *why = "is not a string";
    if (!cJSON_IsString(it) || !excludes_add(&p->excludes, it->valuestring, &why))
      return fail(f, "invalid_request", "open: `workspace_sync.exclude[%d]` %s", i + 1, why);
  }
  return true;
}

/* The kind of workspace `mode` asks for, on the backend the profile gets. */
static bool choose_kind(session *s, const char *mode, bool namespaces, failure *f) {
  if (!s->ws.host_path) { s->ws.kind = WORKSPACE_EMPTY; return true; }
  if (strcmp(mode, "bind") == 0) { s->ws.kind = WORKSPACE_BIND; return true; }
  if (strcmp(mode, "ro") == 0) {
    if (!namespaces) return fail(f, "unsupported", "open: `workspace_sync.mode` \"ro\" needs a bubblewrap session "
                                 "(without namespaces nothing keeps commands from writing the host tree); "
                                 "use \"copy\" or a bwrap profile");
    s->ws.kind = WORKSPACE_RO;
    return true;
  }
  if (strcmp(mode, "copy") != 0)
    return fail(f, "invalid_request", "open: `workspace_sync.mode` must be \"copy\", \"bind\" or \"ro\", not \"%s\"", mode);
  s->ws.kind = namespaces ? WORKSPACE_OVERLAY : WORKSPACE_COPY;
  return true;
}

/* The provider's root, relative to the host tree when it lies inside it (an overlay must not show it). */
static char *root_inside(const char *host_path) {
  char tree[PATH_MAX], root[PATH_MAX];
  if (!root_path() || !realpath(host_path, tree) || !realpath(root_path(), root)) return NULL;
  size_t n = strlen(tree);
  if (strcmp(tree, "/") == 0) return strdup(root + 1);
  if (strncmp(root, tree, n) != 0 || root[n] != '/') return NULL;
  return strdup(root + n + 1);
}

/*
** overlay's work directory, beside the upper layer in the session's
** directory; and the upper layer's top made to look like the host tree's
** (overlay shows the upper one's mode and times). The session's
** directory stays 0700: nobody else reaches either.
*/
static bool make_work_dir(session *s, failure *f) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", s->root, SESSION_WORK_DIR);
  if (mkdir(path, 0700) < 0) return fail_errno(f, errno, "open: creating", path);
  struct stat st;
  int upper = open(s->workspace_host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (upper >= 0 && s->ws.host_path && stat(s->ws.host_path, &st) == 0) {
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    fchmod(upper, st.st_mode & 07777);
    futimens(upper, times);
  }
  if (upper >= 0) close(upper);
  return true;
}

static void read_seams(session *s) {
  const char *no_overlay = getenv("SMOLWF_PROVIDER_NO_OVERLAY");
  s->ws.refuse_overlay = no_overlay && strcmp(no_overlay, "1") == 0;
}

bool workspace_plan_open(workspace_plan *p, session *s, const cJSON *params, bool namespaces, failure *f) {
  const cJSON *sync = NULL;
  const char *host_path = NULL, *mode = "copy";
  if (!param_object(params, "workspace_sync", &sync, f) || !param_string(sync, "host_path", true, &host_path, f) ||
      !param_string(sync, "mode", true, &mode, f) || !parse_excludes(p, sync, f))
    return false;
  if (host_path && !*host_path) host_path = NULL;   /* "" is no workspace, as null is */
  if (host_path) s->ws.host_path = strdup(host_path);
  if (!choose_kind(s, mode, namespaces, f)) return false;
  if (p->excludes.n > 0 && s->ws.kind != WORKSPACE_COPY && s->ws.kind != WORKSPACE_OVERLAY)
    return fail(f, "invalid_request", "open: `workspace_sync.exclude` needs a copied workspace (mode \"copy\")");
  if (!host_path) return true;
  int fd = open(host_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_errno(f, errno, "open: workspace_sync.host_path", host_path);
  if (s->ws.kind == WORKSPACE_COPY) p->copy_from_fd = fd;
  else close(fd);
  read_seams(s);
  if (s->ws.kind != WORKSPACE_OVERLAY) return true;
  p->hide_root = root_inside(host_path);
  return make_work_dir(s, f);
}

/* ====================================================== fork */

static int dir_fd(int fd) {
  return openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

bool workspace_plan_fork(workspace_plan *p, session *s, const session *parent, failure *f) {
  s->ws.kind = parent->ws.kind;
  s->ws.host_path = parent->ws.host_path ? strdup(parent->ws.host_path) : NULL;
  s->ws.refuse_overlay = parent->ws.refuse_overlay;
  if (parent->ws.kind == WORKSPACE_BIND)
    return fail(f, "unsupported", "fork: session `%s` works on the host tree itself (mode \"bind\"): "
                "a fork would write into it too", parent->id);
  if (parent->ws.kind == WORKSPACE_OVERLAY && !make_work_dir(s, f)) return false;
  if (parent->ws.kind != WORKSPACE_RO) p->copy_from_fd = dir_fd(parent->written_fd);
  p->tmp_from_fd = dir_fd(parent->tmp_fd);
  p->copy_layer = true;
  if ((parent->ws.kind != WORKSPACE_RO && p->copy_from_fd < 0) || p->tmp_from_fd < 0)
    return fail_errno(f, errno, "fork: reading session", parent->id);
  return true;
}
