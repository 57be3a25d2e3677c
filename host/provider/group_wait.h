/*
** Waiting for killed process groups to be gone, so `close` answers only
** once nothing the session started is left running: a host that looks
** right after the reply finds no process of the session.
*/
#ifndef SMOL_GROUP_WAIT_H
#define SMOL_GROUP_WAIT_H

#include <stddef.h>
#include <sys/types.h>

/*
** Waits, at most timeout_ms, until no process of the n process groups is
** running any more (zombies count as gone: they run nothing and are their
** parent's to reap). Every member is watched through a pidfd, so the wait
** ends the moment the last one exits. Returns how many were still
** running at the deadline (0 when all are gone).
*/
size_t groups_await_gone(const pid_t *groups, size_t n, int timeout_ms);

/* When process pid started (clock ticks since boot, /proc/PID/stat), or 0 if there is none. */
unsigned long long process_start_time(pid_t pid);

/*
** Whether process group pgid, whose leader started at leader_start, may
** still be the group this provider made. A pgid number is only free again
** once its group is empty; a live process now carrying that number with
** another start time is a new group leader, and its group someone else's.
*/
int group_still_ours(pid_t pgid, unsigned long long leader_start);

#endif
