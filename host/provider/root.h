/*
** The provider's private root directory: one per provider process,
** $XDG_RUNTIME_DIR/smolwf-provider.PID.XXXXXX (or under /tmp), mode 0700,
** holding every session's directory. Made at the first open, locked
** (flock) for the provider's whole life, removed when it stops; roots
** that killed providers left behind are swept when the next one makes its own.
*/
#ifndef SMOL_ROOT_H
#define SMOL_ROOT_H

/* The root's path, made on first use; NULL (errno set) if it cannot be made. */
const char *root_path(void);

/* An O_RDONLY fd of the root (-1 before root_path made it), for *at() calls. */
int root_fd(void);

/* Where roots are made: $XDG_RUNTIME_DIR when usable, else /tmp (for messages). */
const char *root_base(void);

/* Removes the root and everything in it (at stop). */
void root_remove(void);

#endif
