/*
** The seam between the protocol side of the provider (sessions, file
** operations, process bookkeeping) and the way a session's commands are
** isolated. backend_local.c runs commands as plain processes on the host;
** backend_bwrap.c runs them inside one long-lived bubblewrap sandbox per
** session, started once at open.
*/
#ifndef SMOL_BACKEND_H
#define SMOL_BACKEND_H

#include <sys/types.h>
#include "failure.h"
#include "spawn.h"

struct session;   /* session.h */
struct proc;      /* process.h */

typedef struct backend_ops {
  const char *isolation;   /* "none" or "namespaces", announced in capabilities */

  /*
  ** Prepares the session once at open. The session's root, workspace and
  ** tmp directories already exist on the host, and session->ws says what
  ** the workspace is made of; the backend sets how commands see the areas
  ** (session->workspace_view, session->tmp_view), where file operations
  ** start (session->workspace_fd), and may keep private state in
  ** session->backend_data. Returns 1 when the session is ready, 0 when it
  ** will be: the backend then calls backend_opened() once, from the loop
  ** (unless close comes first); -1, with f filled, when it cannot be.
  */
  int (*open)(struct session *s, failure *f);

  /*
  ** Starts one command (spec paths are as commands see them). On success
  ** stores the pid (as signal() understands it) in the proc and returns 0;
  ** later calls proc_exited(proc, wait_status) (process.h) exactly once,
  ** from the loop.
  ** Returns -errno when no process could be made.
  */
  int (*start)(struct session *s, struct proc *p, const spawn_spec *spec);

  /* Sends signo to the process group of p. */
  int (*signal)(struct session *s, struct proc *p, int signo);

  /* Kills everything the session started and releases backend_data. Once. */
  void (*close)(struct session *s);

  /*
  ** A backend whose commands all descend from one process of its own (the
  ** bubblewrap sandbox) says which, or 0 while there is none; the disk
  ** measure (disk_cap.c) then looks for the session's processes under it.
  ** NULL for one whose commands are the provider's own children.
  */
  pid_t (*sandbox_pid)(const struct session *s);
} backend_ops;

/* A pending open's end (opening.c): f is NULL when the session is ready. */
void backend_opened(struct session *s, const failure *f);

extern const backend_ops backend_local;
extern const backend_ops backend_bwrap;

#endif
