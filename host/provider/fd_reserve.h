/*
** Descriptors kept back for clean-up. A provider that ran out of
** descriptors (RLIMIT_NOFILE) must still be able to remove a session's
** files and close its sessions, which takes a few: so a few are held
** open from the start, given up just for the clean-up, and taken again.
*/
#ifndef SMOL_FD_RESERVE_H
#define SMOL_FD_RESERVE_H

/* Holds the reserve again (at start, and after a release); as many as can be had. Any thread may call both. */
void fd_reserve_restore(void);

/* Closes the reserve, so the next opens can succeed. */
void fd_reserve_release(void);

#endif
