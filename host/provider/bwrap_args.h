/*
** The bubblewrap command line of a session: which namespaces, what the
** sandbox sees and where. Shared by the backend (a session's long-lived
** sandbox) and the probe (the same sandbox running `true`), so the probe
** tests exactly what sessions will need.
*/
#ifndef SMOL_BWRAP_ARGS_H
#define SMOL_BWRAP_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include "profile.h"

/* Where commands see the session's areas and where the helper is mounted. */
#define SANDBOX_WORKSPACE "/workspace"
#define SANDBOX_TMP "/tmp"
#define SANDBOX_HELPER "/run/smolwf/helper"

/*
** An overlay workspace's layers, staged where the helper mounts them from
** (and unmounts them once the overlay is up, sandbox_mount.h): the host
** tree read-only, and the session's directory, whose SESSION_UPPER_DIR is
** the upper layer (what the session wrote) and SESSION_WORK_DIR overlay's
** work directory (both must be on one mount).
*/
#define SANDBOX_STAGE_LOWER "/run/smolwf/lower"
#define SANDBOX_STAGE_SESSION "/run/smolwf/session"
#define SESSION_UPPER_DIR "workspace"
#define SESSION_WORK_DIR "work"

/* The host's libraries of the helper, for a profile with its own root (bwrap_args.c, add_helper). */
#define SANDBOX_HELPER_LIBS "/run/smolwf/lib"

typedef struct bwrap_layout {
  const profile *profile;       /* network, extra binds, root */
  const char *workspace_host;   /* bound at /workspace; NULL: an empty tmpfs (probe) */
  bool workspace_ro;            /* ... read-only */
  const char *overlay_lower;    /* non-NULL: /workspace is an overlay of this host tree (see above) */
  const char *session_host;     /* the session's directory, staged for the overlay */
  const char *tmp_host;         /* bound writable at /tmp; NULL: an empty tmpfs (probe) */
  const char *helper_exe;       /* bound read-only at SANDBOX_HELPER; NULL: none */
  char *const *command;         /* what runs inside, NULL-terminated */
} bwrap_layout;

typedef struct argvec {
  char **v;                     /* NULL-terminated */
  size_t len, cap;
} argvec;

/* Fills argv (empty on entry) with the whole command line, argv[0] = bwrap. */
void bwrap_args_build(argvec *argv, const char *bwrap, const bwrap_layout *l);

/*
** Where the helper's dynamic loader is inside a sandbox with the
** profile's own root: the helper is the provider's executable, linked
** against the host's libraries, which that root does not have; so they
** are bound at SANDBOX_HELPER_LIBS and the helper runs as
** `LOADER --library-path SANDBOX_HELPER_LIBS SANDBOX_HELPER helper ...`.
*/
const char *bwrap_helper_loader(void);

void argvec_push(argvec *s, const char *item);
void argvec_clear(argvec *s);

#endif
