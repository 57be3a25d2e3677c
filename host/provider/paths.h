/*
** Session paths to file descriptors, never outside the session, never
** onto another filesystem mounted below it (RESOLVE_NO_XDEV: a file
** operation never waits on a filesystem a command could serve).
**
** A path (relative to the session's cwd, or absolute as commands see it)
** is first normalised by text (".", "..", "//") and must then lie in one of
** the session's areas: its workspace or its temp area; anything else is
** permission_denied. From the area's directory fd, the kernel resolves the
** rest with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so no symlink
** (including one a command made, or one swapped in mid-operation) can lead
** out: the kernel refuses with EXDEV/ELOOP, which we answer as
** permission_denied.
*/
#ifndef SMOL_PATHS_H
#define SMOL_PATHS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "failure.h"
#include "session.h"

typedef struct resolved {
  int area_fd;               /* the session's workspace_fd or tmp_fd (not owned) */
  char rel[PATH_MAX];        /* beneath the area; "." is the area itself */
  char view[PATH_MAX];       /* the normalised path as commands see it */
  char given[PATH_MAX];      /* the path as the request wrote it (for messages; cut if longer) */
} resolved;

/*
** Resolves path for the method `what`; false with a failure that names
** both. A component longer than NAME_MAX is refused here, before any
** file operation could shorten it.
*/
bool path_resolve(const session *s, const char *what, const char *path, resolved *out, failure *f);

/* Resolves the request's `path` (or `path_base64`, for a name that is not UTF-8: names.h). */
bool path_param(const session *s, const char *what, const cJSON *params, resolved *out, failure *f);

/* openat2 of out->rel beneath its area. Returns an fd (O_CLOEXEC) or -errno. */
int path_open(const resolved *p, int flags, mode_t mode);

/* openat2 of any relative path beneath dirfd. Returns an fd or -errno. */
int open_beneath(int dirfd, const char *rel, int flags, mode_t mode);

/*
** Opens the directory that holds p's last component (O_PATH) and points
** *name at that component inside p->rel. For the area itself, *name is NULL.
*/
int path_open_parent(const resolved *p, const char **name);

/* "/a/b" + "c" -> "/a/b/c" into out (PATH_MAX). */
void path_join(char *out, const char *dir, const char *name);

#endif
