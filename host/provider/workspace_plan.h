/*
** What a new session's workspace is made of, decided before anything is
** copied: its kind (session->ws, session.h), and what the opening's jobs
** then copy or hide. From open's workspace_sync, or from a fork's parent.
** Everything here is quick: a few stats and opens, no walk.
*/
#ifndef SMOL_WORKSPACE_PLAN_H
#define SMOL_WORKSPACE_PLAN_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "exclude.h"
#include "failure.h"
#include "session.h"
#include "workspace.h"

typedef struct workspace_plan {
  excludes excludes;
  int copy_from_fd;         /* the tree the prepare job copies into the workspace, or -1 */
  int tmp_from_fd;          /* the tmp it copies into the session's tmp (a fork), or -1 */
  bool copy_layer;          /* copy_from_fd holds a session's own files: whiteouts and xattrs kept */
  char *hide_root;          /* the provider's root inside an overlay's lower layer (relative), or NULL */
  file_id *skip;            /* what a copy never enters (workspace_plan_skip) */
  size_t nskip;
  unsigned pace_ms;         /* $SMOLWF_PROVIDER_COPY_PACE_MS: copies pause after each file (a test seam) */
} workspace_plan;

void workspace_plan_init(workspace_plan *p);
void workspace_plan_free(workspace_plan *p);

/*
** open's workspace_sync (host_path, exclude, mode) for session s, on a
** backend with or without namespaces: sets s->ws and fills p. False with
** f filled (invalid_request naming the field, not_found, unsupported).
*/
bool workspace_plan_open(workspace_plan *p, session *s, const cJSON *params, bool namespaces, failure *f);

/* A fork's: the parent's kind over the same host tree, the parent's files and tmp to copy. */
bool workspace_plan_fork(workspace_plan *p, session *s, const session *parent, failure *f);

/* Is there anything for a job to copy or hide before the backend opens? */
bool workspace_plan_has_work(const workspace_plan *p, const session *s);

/* Adds the directory open at fd, or else the one at path, to what copies never enter. */
void workspace_plan_skip(workspace_plan *p, int fd, const char *path);

#endif
