/*
** Copying the host's workspace into a session at open. Never follows a
** symlink below the workspace's top.
*/
#ifndef SMOL_WORKSPACE_H
#define SMOL_WORKSPACE_H

#include <sys/types.h>
#include "failure.h"

/* A directory by identity, whatever path leads to it. */
typedef struct file_id {
  dev_t dev;
  ino_t ino;
} file_id;

/*
** Copies the tree at host_path into the directory dst_fd: modes and
** mtimes kept, symlinks copied as links (never followed), other special
** files skipped. Not copied at all: directories below host_path tagged as
** caches (a CACHEDIR.TAG with the signature of the Cache Directory Tagging
** Specification; host_path itself is copied even when tagged, since the
** user named it), and the nskip directories of `skip` (the provider's own
** root, so a workspace that contains it is not copied into itself).
** A missing host_path is not_found; anything unreadable fails the copy
** with a message naming it.
*/
bool workspace_copy(const char *host_path, int dst_fd, const file_id *skip, size_t nskip, failure *f);

#endif
