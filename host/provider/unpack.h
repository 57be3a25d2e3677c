/*
** Extracting a tar archive beneath a directory, and never anywhere else
** (the `archive` extension's write_archive, docs/protocol.md).
**
** libarchive only reads the archive; every entry is written here, through
** directory fds, one component at a time with O_NOFOLLOW, from the target
** directory's fd. libarchive's own disk writer was not used: it works on
** path names relative to the process's cwd (a chdir would move every
** thread of the provider), and its ARCHIVE_EXTRACT_SECURE_* checks lstat
** a path and then open it again by name, so a command running in the
** session could swap a checked directory for a symlink in between. Here
** no name is ever resolved twice from a path string and no symlink is
** ever followed, so what the archive names and what the session's
** commands do at the same time cannot lead a write out.
**
** The rules (each refusal ends the extraction with an error naming the
** entry; what was extracted before it stays):
**   - names are relative: an absolute name or a `..` component is
**     permission_denied;
**   - nothing is written through a symlink, old or extracted earlier
**     (permission_denied); a symlink whose target is absolute or climbs
**     above the target directory is refused, and so is a hard link to
**     anything but a regular file inside it;
**   - regular files, directories, symlinks and hard links only: device
**     files, FIFOs and sockets are permission_denied;
**   - permissions keep their rwx bits only (no setuid, setgid or sticky
**     bit), ownership is never applied; files get their mtime back;
**   - an entry replaces a file or link of the same name, never a
**     directory (already_exists); directories merge;
**   - every regular file's size (the whole length of a sparse one) and
**     4096 bytes per new directory count against `disk_left`: the entry
**     that would pass it is limit_exceeded before any of it is written;
**   - an archive that is not a tar, or ends early, is invalid_request.
*/
#ifndef SMOL_UNPACK_H
#define SMOL_UNPACK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "failure.h"

/* Where the archive's bytes come from. */
typedef struct unpack_source {
  /* The next bytes: sets *data (valid until the next call), returns their length; 0 at the end, -1 to abort. */
  ssize_t (*read)(void *ctx, const void **data);
  void *ctx;
} unpack_source;

/* The disk allowance, for the check and its message; and how messages start. */
typedef struct unpack_limits {
  uint64_t cap;            /* the session's disk cap, 0 for none */
  uint64_t used;           /* what the session's files took when the extraction began */
  const char *profile;     /* named in the message (may be NULL) */
  const char *what;        /* what messages start with (NULL: "write_archive") */
} unpack_limits;

typedef struct unpack_stats {
  uint64_t entries;        /* entries extracted */
  uint64_t bytes;          /* archive bytes read */
} unpack_stats;

/*
** Extracts the archive src delivers beneath the directory dirfd (any fd
** of it, O_PATH will do; not closed). False with f filled on the first
** refusal or failure (a source that aborts fails it too; its owner knows why).
*/
bool unpack(int dirfd, const unpack_source *src, const unpack_limits *lim, unpack_stats *st, failure *f);

/* The same for an archive in memory (the fuzzing entry point). */
bool unpack_memory(int dirfd, const void *data, size_t len, const unpack_limits *lim, unpack_stats *st, failure *f);

#endif
