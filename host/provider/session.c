/*
** Sessions and the table of open ones (see session.h).
*/
#define _GNU_SOURCE
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"
#include "root.h"
#include "tree.h"

/* The open sessions (the context's part). */
typedef struct session_table {
  session *first;
  unsigned long next_id;
} session_table;

static session_table *table(void) {
  return CTX_PART(sessions);
}

/* ===== making and freeing ===== */

static int make_area(const char *root, const char *name, char **host_path) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, name);
  if (mkdir(path, 0700) < 0) return -1;
  *host_path = strdup(path);
  return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

session *session_new(const profile *p, failure *f) {
  const char *base = root_path();
  if (!base) { fail_errno(f, errno, "open: creating the provider's root directory under", root_base()); return NULL; }
  session *s = calloc(1, sizeof *s);
  if (!s) abort();
  char id[32], root[PATH_MAX];
  snprintf(id, sizeof id, "s%lu", ++table()->next_id);
  snprintf(root, sizeof root, "%s/%s", base, id);
  s->id = strdup(id);
  s->profile = p;
  s->workspace_fd = s->written_fd = s->tmp_fd = -1;
  if (mkdir(root, 0700) < 0) { fail_errno(f, errno, "open: creating", root); free(s->id); free(s); return NULL; }
  s->root = strdup(root);
  s->workspace_fd = make_area(root, "workspace", &s->workspace_host);
  s->tmp_fd = s->workspace_fd < 0 ? -1 : make_area(root, "tmp", &s->tmp_host);
  if (s->tmp_fd < 0) { fail_errno(f, errno, "open: creating session directories in", root); session_free(s); return NULL; }
  s->written_fd = fcntl(s->workspace_fd, F_DUPFD_CLOEXEC, 0);
  return s;
}

void session_free(session *s) {
  if (s->close_wait) { s->close_wait(s->close_data); s->close_done(s->close_data); }
  if (s->workspace_fd >= 0) close(s->workspace_fd);
  if (s->written_fd >= 0) close(s->written_fd);
  if (s->tmp_fd >= 0) close(s->tmp_fd);
  free(s->ws.host_path);
  if (s->root) {   /* only a session that never opened still has it: its empty directories, here and now */
    int rc = tree_remove(root_fd(), s->id);
    if (rc < 0) fprintf(stderr, "smolwf-provider: removing %s: %s\n", s->root, strerror(-rc));
  }
  free(s->id); free(s->root); free(s->workspace_host); free(s->tmp_host);
  free(s->workspace_view); free(s->tmp_view); free(s->cwd_view);
  free(s->groups);
  free(s->group_reaped);
  free(s);
}

/* ===== the table ===== */

void session_add(session *s) {
  session_table *t = table();
  s->next = t->first;
  t->first = s;
}

void session_remove(session *s) {
  for (session **pp = &table()->first; *pp; pp = &(*pp)->next)
    if (*pp == s) { *pp = s->next; return; }
}

session *session_first(void) {
  return table()->first;
}

session *session_find(const char *id) {
  for (session *s = table()->first; s; s = s->next)
    if (strcmp(s->id, id) == 0) return s;
  return NULL;
}

void sessions_free(void) {
  provider *ctx = provider_ctx();
  free(ctx->sessions);
  ctx->sessions = NULL;
}

/* ===== process groups ===== */

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
