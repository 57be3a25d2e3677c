/*
** A session: one sandbox opened by `open`, with its private files and the
** processes it started. Every session lives under the provider's one
** private root directory ($XDG_RUNTIME_DIR or /tmp, smolwf-provider.XXXXXX),
** in <root>/<session-id>/ (mode 0700) with workspace/ and tmp/ inside.
**
** Ownership: session.c creates and frees sessions; the backend chosen at
** open fills workspace_view/tmp_view and may keep backend_data; process.c
** links the session's processes into `procs`.
*/
#ifndef SMOL_SESSION_H
#define SMOL_SESSION_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>
#include "backend.h"
#include "profile.h"

struct proc;

typedef struct session {
  char *id;                 /* "s1", "s2", ... unique within this provider */
  char *root;               /* host path of the private root, mode 0700 */
  char *workspace_host;     /* host path: <root>/workspace */
  char *tmp_host;           /* host path: <root>/tmp */
  char *workspace_view;     /* how commands see the workspace (set by backend open) */
  char *tmp_view;           /* how commands see tmp (set by backend open) */
  char *cwd_view;           /* the session's cwd as commands see it */
  int workspace_fd;         /* O_PATH dirfd of workspace_host: file operations start here */
  int tmp_fd;               /* O_PATH dirfd of tmp_host */
  const profile *profile;   /* the profile named at open (never NULL) */
  const backend_ops *backend;   /* local or bwrap; for auto/... the one picked */
  void *backend_data;       /* the backend's own state, released by backend->close */
  uv_loop_t *loop;
  struct proc *procs;       /* processes started and not yet forgotten (process.c) */
  pid_t *groups;            /* process groups started here that may still have members: killed at close */
  bool *group_reaped;       /* its leader was reaped: a live process with that pid is not ours */
  size_t ngroups, groups_cap;
  struct disk_watch *disk;  /* the checked disk allowance (disk_cap.h), NULL without one */
  bool closing;
  struct session *next;     /* in the provider's list of open sessions */
} session;

/* The provider's private root directory, created on first use; NULL if it cannot be made. */
const char *session_provider_root(void);

/* The first open session (then ->next), for walking all of them. */
session *session_first(void);

/* Finds an open session by its id, or NULL. */
session *session_find(const char *id);

/* Remembers a process group the session started, so close can kill it. */
void session_add_group(session *s, pid_t pgid);

/*
** Called once the group's leader was reaped: forgets the group when it has
** no member left (the common case), else remembers that the leader is gone.
*/
void session_group_leader_reaped(session *s, pid_t pgid);

/* Kills the session's processes, removes its files and frees it. */
void session_close(session *s);

/* Closes every open session and removes the provider's root directory. */
void session_close_all(void);

#endif
