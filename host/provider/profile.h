/*
** Profiles: what a session is allowed to do. Built-in ones (bwrap/default,
** bwrap/network, local/default, auto/default) plus users' own from a JSON
** file (--profiles FILE or $SMOLWF_PROFILES).
*/
#ifndef SMOL_PROFILE_H
#define SMOL_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include "spawn.h"

typedef enum isolation { ISOLATION_NONE, ISOLATION_NAMESPACES } isolation;

typedef struct bind_mount {
  char *host_path;        /* absolute path on the host */
  char *sandbox_path;     /* where commands see it */
  bool writable;
} bind_mount;

typedef struct profile {
  char *name;             /* "PROVIDER/NAME", e.g. "bwrap/default" */
  isolation isolation;
  bool network;           /* host network reachable */
  bool automatic;         /* auto/...: picks the best isolation available */
  char **env;             /* "K=V" entries added to the base environment, NULL-terminated */
  bind_mount *binds;
  size_t nbinds;
  limits limits;
  char *root;             /* the sandbox's own /usr, /etc...: a root file system's directory; NULL: the host's */
} profile;

/* Loads the built-in profiles, then those of path (may be NULL). 0 or -1 with a message in err. */
int profiles_load(const char *path, char *err, size_t errlen);

/* The profile named "provider/name", or NULL. */
const profile *profile_find(const char *provider, const char *name);

/* Every known profile, for `describe`. */
const profile *profiles_all(size_t *count);

void profiles_free(void);

#endif
