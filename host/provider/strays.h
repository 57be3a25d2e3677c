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

/*
** Kills (SIGKILL) the processes of a local session outside its groups:
** every descendant of a member of the n groups, and every process
** re-parented to the provider whose environment has TMPDIR=tmpdir (each
** command of a local session gets its session's own TMPDIR), with their
** descendants. Waits at most timeout_ms for them to be gone and reaps
** those that are the provider's children. Returns how many were still
** running at the deadline.
*/
size_t strays_kill_session(const pid_t *groups, size_t n, const char *tmpdir, int timeout_ms);

/* At exit: kills every remaining descendant of the provider, waits as above and reaps. */
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
