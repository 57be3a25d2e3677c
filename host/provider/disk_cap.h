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
**   - checked, per session (both backends, through the disk watch below):
**     the session's workspace and tmp are measured while commands run
**     (every DISK_CHECK_MS) and after each exits; once over the allowance
**     the session's running commands are killed and new ones refused
**     (limit_exceeded) until files are removed. The provider's own
**     write_file is checked before it writes (disk_watch_allows_write).
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

/*
** The checked part, one watch per session with an allowance (session->disk;
** NULL without one, and then every call below does nothing or allows).
** Backends call disk_watch_changed after a command started (exited =
** false) or after commands exited (true: measure now); the watch runs its
** timer while the session has running commands, and kills them (through
** the backend's signal) once the session is over its allowance.
*/
void disk_watch_open(struct session *s);
void disk_watch_changed(struct session *s, bool exited);

/* 0, or -EDQUOT while the session is (still, measured again) over its allowance. */
int disk_watch_allows_start(struct session *s);

/*
** May the provider write `adding` bytes in place of `replacing` (an
** existing file's allocated bytes that the write truncates)? False, with
** *used and *cap set, when the session would be over its allowance.
*/
bool disk_watch_allows_write(const struct session *s, uint64_t adding, uint64_t replacing,
                             uint64_t *used, uint64_t *cap);

/* Stops the timer and frees the watch (once its handle is closed). */
void disk_watch_close(struct session *s);

#endif
