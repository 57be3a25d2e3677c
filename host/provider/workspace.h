/*
** Whole trees: copying the host's workspace into a session at open, and
** removing a session's files at close. Neither ever follows a symlink.
*/
#ifndef SMOL_WORKSPACE_H
#define SMOL_WORKSPACE_H

#include "params.h"

/*
** Copies the tree at host_path into the directory dst_fd: modes and
** mtimes kept, symlinks copied as links (never followed), other special
** files skipped. A missing host_path is not_found.
*/
bool workspace_copy(const char *host_path, int dst_fd, failure *f);

/* Removes name (a file, link or whole tree) in dirfd. 0 or -errno. */
int tree_remove(int dirfd, const char *name);

#endif
