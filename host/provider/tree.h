/*
** Removing a whole tree: a session's directories at close, a provider's
** root at stop, what `remove` names. Never follows a symlink.
*/
#ifndef SMOL_TREE_H
#define SMOL_TREE_H

/* Removes name (a file, link or whole tree) in dirfd. 0 or -errno. */
int tree_remove(int dirfd, const char *name);

#endif
