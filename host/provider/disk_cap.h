/*
** A session's disk allowance (the profile's limits.disk_bytes, bytes)
** and inode allowance (limits.disk_inodes), checked.
**
** Nothing an ordinary user can set up bounds the space a pair of host
** directories takes: a size-limited tmpfs or a loop device needs root to
** mount on the host, project quotas need root and a filesystem made for
** them, and a tmpfs mounted inside the sandbox would hide the session's
** files from the provider's file operations. So the allowance is kept in
** two parts:
**   - enforced by the kernel, per file: every command's RLIMIT_FSIZE is at
**     most what the session had left of disk_bytes at the last measure
**     before it started (disk_watch_limits), so one file alone never takes
**     the session past its cap;
**   - checked, per session (both backends, through the disk watch below):
**     the session's workspace and tmp, at any depth, and the unnamed
**     files its processes hold open (disk_walk.h, disk_held.h) are
**     measured on a job's thread, never on the loop, one measure at a
**     time: while commands run (DISK_CHECK_FAST_MS after a command
**     starts, then at most DISK_CHECK_MS apart, sooner while usage grows;
**     disk_cap.c's next_pause) and after each exits. Once over either allowance the session's running
**     commands are killed and new ones refused (limit_exceeded).
** The provider's own write_file is checked against the last measure plus
** what the provider wrote since (disk_watch_allows_write). A refusal is
** never given on an old measure: the request waits for a measure that
** starts after it came (disk_watch_recheck), then runs again, once.
*/
#ifndef SMOL_DISK_CAP_H
#define SMOL_DISK_CAP_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "failure.h"
#include "reply.h"
#include "spawn.h"

struct session;

/* Pause between measures of a session with running commands: the longest, and the shortest. */
#define DISK_CHECK_MS 200
#define DISK_CHECK_FAST_MS 10

/*
** Bytes the session's workspace and tmp take on disk (allocated blocks,
** each inode once, not following symlinks, not crossing into other
** filesystems). Stops counting once past limit (0: count everything).
** Walks the tree where it is called: for a job's thread only.
*/
uint64_t disk_usage(const struct session *s, uint64_t limit);

/*
** The checked part, one watch per session with an allowance (session->disk;
** NULL without one, and then every call below does nothing or allows).
** Backends call disk_watch_changed after a command started (exited =
** false) or after commands exited (true: measure now); the watch measures
** while the session has running commands, and kills them (through the
** backend's signal) once the session is over an allowance.
*/
void disk_watch_open(struct session *s);
void disk_watch_changed(struct session *s, bool exited);

/* 0, or -EDQUOT while the last measure found the session over an allowance. */
int disk_watch_allows_start(struct session *s);

/* Lowers l's file_size to what the session had left at the last measure. */
void disk_watch_limits(const struct session *s, limits *l);

/*
** May the provider write `adding` bytes in place of `replacing` (an
** existing file's allocated bytes that the write truncates; creates: a
** new file)? Judged on the last measure plus what the provider wrote
** since. False with f filled (naming path) when that would pass an allowance.
*/
bool disk_watch_allows_write(const struct session *s, const char *path, uint64_t adding, uint64_t replacing,
                             bool creates, failure *f);

/* The provider wrote bytes (and made a new file when creates): counted on top of the last measure. */
void disk_watch_wrote(struct session *s, uint64_t bytes, bool creates);

typedef void (*disk_method_fn)(request *r, struct session *s, const cJSON *params);

/*
** About to refuse r for an allowance: true when the watch takes r over
** instead (params copied) to call fn(r, s, params) again once a measure
** that starts now has ended. False when r was run again already, or the
** session has no watch: refuse it then.
*/
bool disk_watch_recheck(struct session *s, request *r, const cJSON *params, disk_method_fn fn);

/*
** Stops measuring and frees the watch (once its timer is closed and a
** measure in flight has ended: it is cancelled and its figure dropped).
** Requests waiting for a measure get unknown_session.
*/
void disk_watch_close(struct session *s);

#endif
