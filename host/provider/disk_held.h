/*
** Files a session's processes hold open after their last name is gone
** (unlinked, st_nlink 0): they take disk space no walk of the session's
** directories can see, until the last descriptor on them closes. Found in
** /proc/PID/task/TID/fd of every process of the session, on the walk's
** thread (disk_cap.c), each inode counted once (disk_walk.h's tally).
**
** The session's processes are those of its process groups and their
** descendants (local sessions: a command that left its group still
** carries the session's TMPDIR, or descends from one that does), or the
** sandbox's outermost process and its descendants (bubblewrap: nothing
** inside can leave the sandbox's pid namespace, whose orphans are
** adopted inside it). Every thread's table is read, as a thread may have
** descriptors of its own. A process whose table the provider may not
** read (it made itself non-dumpable, or runs a setuid program, in a
** local session of a provider that is not root) is counted as hidden:
** what it holds cannot be known. Not hidden, though unreadable: a thread
** that is exiting, and a bubblewrap sandbox's pid 1 (the helper, which
** holds no file of a command).
*/
#ifndef SMOL_DISK_HELD_H
#define SMOL_DISK_HELD_H

#include <stddef.h>
#include <sys/types.h>

#include "disk_walk.h"

typedef struct disk_procs {
  pid_t *groups;            /* process groups the session started */
  size_t ngroups;
  pid_t sandbox;            /* the sandbox's outermost process, or 0 */
  char *env;                /* "TMPDIR=..." only this session's commands start with, or NULL */
} disk_procs;

void disk_procs_free(disk_procs *who);

/* Adds the unnamed regular files on one of the ndevs filesystems devs that the session's processes hold. */
void disk_count_held(disk_tally *t, const disk_procs *who, const dev_t *devs, size_t ndevs);

#endif
