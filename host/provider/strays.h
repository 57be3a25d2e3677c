/*
** Processes of a local session that left its process groups: a command's
** descendant that called setsid() (a daemon, `setsid cmd &`) is in a group
** of its own, so killing the session's groups misses it. The provider is
** a child subreaper (PR_SET_CHILD_SUBREAPER): such a process whose parent
** exited is re-parented to the provider instead of init, so it stays
** findable, and the provider reaps it when it exits.
*/
#ifndef SMOL_STRAYS_H
#define SMOL_STRAYS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Makes the provider the subreaper of everything it starts. Call once, before serving. */
void strays_init(void);

/* What strays_kill_session killed: pidfds to wait on, pids to reap. */
typedef struct stray_kills {
  int *pidfds;
  pid_t *pids;
  size_t n;
} stray_kills;

/*
** Kills (SIGKILL) the processes of a local session outside its groups:
** every descendant of a member of the n groups, and every process
** re-parented to the provider whose environment has TMPDIR=tmpdir (each
** command of a local session gets its session's own TMPDIR), with their
** descendants. Does not wait, so a close never waits on the loop: the
** killed are handed back in out, for stray_kills_await (on any thread,
** a removal's job) and then stray_kills_reap (on the loop).
*/
void strays_kill_session(const pid_t *groups, size_t n, const char *tmpdir, stray_kills *out);

/* Waits at most timeout_ms until every killed one is gone (closing the pidfds); how many were not. */
size_t stray_kills_await(stray_kills *k, int timeout_ms);

/* Reaps those that are the provider's children now, and frees k's arrays. */
void stray_kills_reap(stray_kills *k);

/* At exit: kills every remaining descendant of the provider, waits at most timeout_ms for them and reaps (nothing else is served by then). */
size_t strays_kill_all(int timeout_ms);

/*
** The children a backend reaps itself (a local command's watch, a session's
** bwrap): strays_reap leaves them alone. Own right after the spawn; disown
** once reaped.
*/
void strays_own(pid_t pid);
void strays_disown(pid_t pid);

/* Reaps exited children of the provider that no backend owns. One waitid when there are none. */
void strays_reap(void);

/* Forgets the owned children (at exit, after the last reap). */
void strays_free(void);

#endif
