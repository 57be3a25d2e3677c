/*
** A session's disk allowance (the profile's limits.disk_bytes), checked.
**
** Nothing an ordinary user can set up bounds the space a pair of host
** directories takes: a size-limited tmpfs or a loop device needs root to
** mount on the host, project quotas need root and a filesystem made for
** them, and a tmpfs mounted inside the sandbox would hide the session's
** files from the provider's file operations. So the allowance is kept in
** two parts:
**   - enforced by the kernel, per file: every command's RLIMIT_FSIZE is at
**     most disk_bytes (profile.c), so no single write can blow through it;
**   - checked, per session: the bwrap backend measures the session's
**     workspace and tmp while commands run (every DISK_CHECK_MS) and after
**     each exits; once over the allowance it kills the session's running
**     commands and refuses new ones (limit_exceeded) until files are removed.
** The overshoot is bounded by what commands write between two checks.
*/
#ifndef SMOL_DISK_CAP_H
#define SMOL_DISK_CAP_H

#include <stdbool.h>
#include <stdint.h>

struct session;

/* How often a session with running commands and a disk allowance is measured. */
#define DISK_CHECK_MS 200

/*
** Bytes the session's workspace and tmp take on disk (allocated blocks,
** not following symlinks, not crossing into other filesystems). Stops
** counting once past limit (0: count everything).
*/
uint64_t disk_usage(const struct session *s, uint64_t limit);

/* True when the session has an allowance and uses more than it; *used gets the usage. */
bool disk_cap_exceeded(const struct session *s, uint64_t *used);

#endif
