/*
** Listings of directories the code under test must not touch: each
** entry's name, type, size, mode, mtime (and a symlink's target) as one
** string, so two listings compare with strcmp.
*/
#ifndef FUZZ_TREE_LISTING_H
#define FUZZ_TREE_LISTING_H

/* Makes path as a small tree (a file, a directory with a file in it) to list before and after. */
void tree_listing_make_canary(const char *path);

/* The listing of path and everything beneath it (malloc'ed). */
char *tree_listing(const char *path);

/* The names and types of path's own entries only (malloc'ed). */
char *tree_listing_top(const char *path);

/* Fails (fuzz_fail) when path's listing is no longer before; what names it. */
void tree_listing_expect(const char *path, const char *before, const char *what);
void tree_listing_expect_top(const char *path, const char *before, const char *what);

#endif
