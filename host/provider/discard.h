/*
** Removing a closed session's files off the loop: a session that wrote
** 100k files takes a second to remove, and other sessions are served
** meanwhile. The session itself is freed at once; what its backend left
** to wait for (the sandbox's end, session.h) and then its directory go on
** a job (job.h), and the close that asked for it is answered after.
*/
#ifndef SMOL_DISCARD_H
#define SMOL_DISCARD_H

#include "reply.h"
#include "session.h"

/*
** Frees s (its backend already closed) and removes its directory on a
** job; then answers r with f (or {} when f is NULL), and `also` with {}
** (either may be NULL): a failed open, and the close that cancelled it.
** A directory that could not be removed makes the close's answer an
** error naming it and why.
*/
void session_discard(session *s, request *r, const failure *f, request *also);

/*
** Ends what s's backend left to wait for (a sandbox that did not start,
** before the open tries again) on a job, as a close would; s stays open.
*/
void session_discard_sandbox(session *s);

/*
** A job uses s's files (a fork's copy reads them, a remove empties part
** of them): until the matching session_release, a close of s ends its
** commands but leaves its files, so a fork asked for before the close
** gets the whole snapshot and no two removals race in one tree.
*/
void session_hold(session *s);

/* That job is done: when it was the last and s was closed meanwhile, its files go and its close is answered. */
void session_release(session *s);

/* Closing s (ended, out of the table): true when jobs hold its files, r then answered after the last release. */
bool session_hold_close(session *s, request *r);

/* Waits until every removal has ended (the provider is stopping). */
void discards_finish(void);

#endif
