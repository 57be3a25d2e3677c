/*
** A workspace's exclude patterns, gitignore-style: what a copy leaves out
** and what an overlay workspace hides.
**
**   name        no slash but a trailing one: matches at any depth (`.git`, `*.o`)
**   a/b, /a     a slash before the end: anchored at the workspace's top
**   dir/        a trailing slash: directories only
**   *, ?, [..]  within one component; a component `**` spans any number of them
**   !pattern    re-includes what an earlier pattern excluded (the last match wins)
**
** As in git, nothing below an excluded directory is looked at, so a `!`
** cannot bring back a file whose directory is excluded.
*/
#ifndef SMOL_EXCLUDE_H
#define SMOL_EXCLUDE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct exclude_rule {
  char *pattern;     /* without the `!`, the leading and the trailing slash */
  bool negated;
  bool dir_only;
  bool anchored;     /* matched against the whole relative path, else against every tail of it */
} exclude_rule;

typedef struct excludes {
  exclude_rule *rules;
  size_t n;
} excludes;

/*
** Adds one pattern. False (nothing added) for an empty one, a `..`
** component or one longer than PATH_MAX; *why says which.
*/
bool excludes_add(excludes *x, const char *pattern, const char **why);

/* Is the entry at rel (relative to the top, no leading slash) excluded? */
bool excludes_match(const excludes *x, const char *rel, bool is_dir);

/*
** True when every rule names one path (anchored, no wildcard, no `!`):
** then what they exclude is found without walking the tree.
*/
bool excludes_all_literal(const excludes *x);

void excludes_free(excludes *x);

#endif
