/*
** A session: one sandbox opened by `open`, with its private files. Every
** session lives under the provider's root directory (root.h), in
** <root>/<session-id>/ (mode 0700) with workspace/ and tmp/ inside.
**
** Ownership: session.c makes and frees sessions and keeps the table of
** open ones; lifecycle.c opens and closes them; the backend chosen at
** open fills workspace_view/tmp_view and may keep backend_data; the
** session's processes are process.c's (it finds them by session).
*/
#ifndef SMOL_SESSION_H
#define SMOL_SESSION_H

#include <stdbool.h>
#include <sys/types.h>

#include "backend.h"
#include "failure.h"
#include "profile.h"

/* What a session's workspace is made of: opening.c decides, the backend mounts it. */
typedef enum workspace_kind {
  WORKSPACE_EMPTY,          /* nothing from the host */
  WORKSPACE_COPY,           /* the host tree copied in (shared extents where the file system can) */
  WORKSPACE_OVERLAY,        /* the host tree as the read-only lower layer of an overlay (bwrap) */
  WORKSPACE_BIND,           /* the host tree itself: writes go to it */
  WORKSPACE_RO,             /* the host tree itself, read-only */
} workspace_kind;

typedef struct session_workspace {
  workspace_kind kind;
  char *host_path;          /* the host tree; NULL for an empty workspace */
  const char *mechanism;    /* what capabilities.workspace says: "overlay", "reflink", "copy", "bind", "ro", "empty" */
  int overlay_refused;      /* -errno when the kernel refused the overlay (kind is then WORKSPACE_COPY) */
  bool refuse_overlay;      /* make the kernel refuse it ($SMOLWF_PROVIDER_NO_OVERLAY=1, for tests) */
} session_workspace;

typedef struct session {
  char *id;                 /* "s1", "s2", ... unique within this provider */
  char *root;               /* host path of the session's directory, mode 0700 */
  char *workspace_host;     /* host path: <root>/workspace */
  char *tmp_host;           /* host path: <root>/tmp */
  char *workspace_view;     /* how commands see the workspace (set by backend open) */
  char *tmp_view;           /* how commands see tmp (set by backend open) */
  char *cwd_view;           /* the session's cwd as commands see it */
  int workspace_fd;         /* O_PATH dirfd where file operations start: the workspace as commands see it */
  int written_fd;           /* O_PATH dirfd of what the session itself writes (the disk cap counts it) */
  session_workspace ws;
  int tmp_fd;               /* O_PATH dirfd of tmp_host */
  const profile *profile;   /* the profile named at open (never NULL) */
  const backend_ops *backend;   /* local or bwrap; for auto/... the one picked */
  void *backend_data;       /* the backend's own state, released by backend->close */
  pid_t *groups;            /* process groups started here that may still have members: killed at close */
  bool *group_reaped;       /* its leader was reaped: a live process with that pid is not ours */
  size_t ngroups, groups_cap;
  struct disk_watch *disk;  /* the checked disk allowance (disk_cap.h), NULL without one */
  /*
  ** What the backend's close left to wait for (its sandbox's end): done on
  ** the thread that removes the session's files, before it removes them
  ** (close_wait, which may block), then close_done on the loop. NULL: nothing.
  */
  void (*close_wait)(void *data);
  void (*close_done)(void *data);
  void *close_data;
  bool closing;
  unsigned held_by;         /* jobs using this session's files right now: forks' copies, removes (discard.h) */
  struct request *close_req;   /* a close that came meanwhile: answered once they are done and the files gone */
  struct session *next;     /* in the table of open sessions */
} session;

/* A new session of profile p with its empty directories, not yet in the table; NULL with f filled. */
session *session_new(const profile *p, failure *f);

/* Removes the session's directories and frees it (out of the table, its disk watch closed). */
void session_free(session *s);

/* Adds s to the table of open sessions / takes it out. */
void session_add(session *s);
void session_remove(session *s);

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

/* Frees the table (at exit, when no session is left). */
void sessions_free(void);

#endif
