/*
** Whole trees into a session: copying the host's workspace in (or a
** session's files into its fork), and hiding parts of an overlay's lower
** layer. All of it runs on a job's thread (job.h): it takes as long as
** the tree, checks the job's cancel flag between files and counts its
** progress there. Never follows a symlink below the top.
*/
#ifndef SMOL_WORKSPACE_H
#define SMOL_WORKSPACE_H

#include <stdint.h>
#include <sys/types.h>

#include "exclude.h"
#include "failure.h"
#include "job.h"

/* A directory by identity, whatever path leads to it. */
typedef struct file_id {
  dev_t dev;
  ino_t ino;
} file_id;

/* At most this many skipped files are named; the rest are counted. */
#define COPY_WARNINGS_KEPT 16

typedef struct copy_spec {
  int src_fd;                   /* the directory copied from (the caller's) */
  const char *src_label;        /* how messages name it: the host path */
  int dst_fd;                   /* the directory copied into (the caller's), empty */
  const file_id *skip;          /* directories never entered (the provider's own root) */
  size_t nskip;
  const excludes *excludes;     /* NULL: none */
  bool skip_cache_dirs;         /* leave out directories below the top tagged CACHEDIR.TAG */
  bool overlay_layer;           /* an overlay's upper layer: whiteouts and xattrs kept too */
  job *job;                     /* cancel flag and progress counters */
  unsigned pace_ms;             /* a pause after each file: lets tests act in the middle of a copy */
} copy_spec;

typedef struct copy_outcome {
  bool ok;                      /* false: f says why (or the job was cancelled) */
  failure f;
  bool cloned;                  /* every file's data was shared by FICLONE (a reflink copy) */
  uint64_t skipped;             /* files that vanished or changed while they were copied */
  char *warnings[COPY_WARNINGS_KEPT];   /* the first ones, malloc'ed */
} copy_outcome;

/*
** Copies the tree at src_fd into dst_fd: modes and mtimes kept, symlinks
** copied as links (never followed), sockets, FIFOs and devices skipped.
** File data is shared with FICLONE where the file system can (btrfs,
** xfs), else copied in the kernel (copy_file_range), else read and
** written. A file or directory that vanishes, or a file that changes,
** while it is copied is skipped and named in the outcome's warnings;
** one the provider may not read fails the copy with permission_denied
** naming it; a tree deeper than 256 levels is limit_exceeded.
*/
void workspace_copy(const copy_spec *spec, copy_outcome *out);

/*
** Hides from an overlay what spec's excludes match in its lower layer
** (src_fd): a whiteout for each in the upper layer (dst_fd), below
** directories made to look like the lower ones. Walks only the
** directories it must (none when excludes_all_literal), reading no file.
*/
void workspace_hide(const copy_spec *spec, copy_outcome *out);

/* Hides the one entry at rel (below src_fd) the same way: the provider's own root inside a lower layer. */
bool workspace_hide_path(int src_fd, int dst_fd, const char *rel, failure *f);

void copy_outcome_clear(copy_outcome *out);

#endif
