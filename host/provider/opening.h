/*
** Opening a session, from `open` or `fork` to its reply, without ever
** waiting on the loop: what takes as long as a tree (a copy, hiding
** excluded paths from an overlay) runs as a job (job.h), and the
** bubblewrap sandbox's HELLO is awaited by the backend's loop handle.
** Meanwhile the loop serves every other session; an opening session is
** not in the session table yet, and nothing but `close` reaches it.
**
**   plan      profile, workspace kind (session.h), excludes, cwd
**   prepare   a job: copy the host tree in (local sessions), or the
**             parent's files (fork), or hide excluded paths (overlay)
**   backend   the backend's open (bwrap: until HELLO, which says
**             whether the kernel took the overlay)
**   fill      a job: the copy, when the kernel refused the overlay
**   done      cwd checked, the session added, the session object sent
**
** An open that takes longer than a second sends `progress` events (if
** asked to), and `close` naming the opening session (its id comes in
** those events), shutdown, end of input or a signal cancel it: the job
** stops at its next file, the sandbox is ended, the files are removed.
** A fork's parent closed while the fork copies it keeps its files until
** the copy is over (session_hold, discard.h).
*/
#ifndef SMOL_OPENING_H
#define SMOL_OPENING_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "reply.h"
#include "session.h"

void method_open(request *r, const cJSON *params);

/* `fork`: a new session whose workspace and tmp start as a copy-on-write snapshot of s's. */
void method_fork(request *r, session *s, const cJSON *params);

/* Cancels the opening session id (close: r then gets {} once its files are gone). False if there is none. */
bool opening_cancel(const char *id, request *r);

/* Cancels every opening session and waits for their jobs to end (when the provider stops). */
void openings_cancel_all(void);

#endif
