/*
** The bubblewrap command line of a session: which namespaces, what the
** sandbox sees and where. Shared by the backend (a session's long-lived
** sandbox) and the probe (the same sandbox running `true`), so the probe
** tests exactly what sessions will need.
*/
#ifndef SMOL_BWRAP_ARGS_H
#define SMOL_BWRAP_ARGS_H

#include <stddef.h>
#include "profile.h"

/* Where commands see the session's areas and where the helper is mounted. */
#define SANDBOX_WORKSPACE "/workspace"
#define SANDBOX_TMP "/tmp"
#define SANDBOX_HELPER "/run/smolwf/helper"

typedef struct bwrap_layout {
  const profile *profile;       /* network and extra binds */
  const char *workspace_host;   /* bound writable at /workspace; NULL: an empty tmpfs (probe) */
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

void argvec_push(argvec *s, const char *item);
void argvec_clear(argvec *s);

#endif
