/*
** Waiting for killed process groups to be gone, so `close` answers only
** once nothing the session started is left running: a host that looks
** right after the reply finds no process of the session.
*/
#ifndef SMOL_GROUP_WAIT_H
#define SMOL_GROUP_WAIT_H

#include <stdbool.h>
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

/* The same for the processes of n pidfds, which it takes over (and closes). */
size_t pidfds_await_gone(const int *pidfds, size_t n, int timeout_ms);

/* Whether pgrp is one of the n groups. */
bool groups_contain(const pid_t *groups, size_t n, pid_t pgrp);

/* Whether any of the n process groups still has a member (a zombie counts). */
bool groups_any_left(const pid_t *groups, size_t n);

/*
** Whether process group pgid, whose leader this provider made and reaped,
** may still be the group it made. A group's number is pinned while any
** member lives (the kernel does not reuse it), so a live process carrying
** the number is someone else's: the group emptied, the number was freed
** and reused. (While our leader is unreaped its pid is ours: no question.)
*/
bool group_still_ours(pid_t pgid);

/*
** Calls fn(pid, pidfd, ctx) for every process but ourselves, with a pidfd
** opened before fn looks at it (so a pid reused meanwhile is seen as the
** process it now names); fn returns true when it keeps the pidfd, which
** is closed otherwise.
*/
void proc_each(bool (*fn)(pid_t pid, int pidfd, void *ctx), void *ctx);

/* Whether the environment process pid started with has the entry want (or one that starts with it, when prefix). */
bool proc_env_has(pid_t pid, const char *want, bool prefix);

/* What /proc/PID/stat (or /proc/PID/task/TID/stat) says of a process (or thread). */
typedef struct proc_stat {
  char state;          /* R, S, Z, X, ... */
  pid_t ppid, pgrp;
  unsigned flags;      /* the kernel's PF_* */
  long threads;
} proc_stat;

/* Reads a stat file (path); false if it is gone or cannot be parsed. */
bool proc_read_stat(const char *path, proc_stat *st);

/*
** The parent and group of process pid from /proc/PID/stat; false if it is
** gone or a zombie (a zombie leader whose other threads still run is not:
** its process runs on).
*/
bool proc_running_stat(pid_t pid, pid_t *ppid, pid_t *pgrp);

#endif
