/*
** Packing files of a session into a tar archive (the `archive`
** extension's read_archive, docs/protocol.md), written by libarchive as
** pax: ustar headers, and an extended header only for what ustar cannot
** say (long names, large sizes, times with a fraction of a second).
**
** The files are reached through directory fds with O_NOFOLLOW, never by
** path: a symlink is packed as a link, never followed, so nothing outside
** the directories handed in can end up in the archive. With follow_links
** a symlink is packed as what it points to instead, found again from its
** area's fd with the kernel keeping the walk beneath the area (paths.h):
** a link out of the session, to nothing, or 8 links deep fails. Regular files,
** directories and symlinks are packed (hard links as separate files);
** FIFOs, sockets and devices inside a directory are left out, as the
** workspace copy leaves them out. Ownership is not recorded (0/0).
*/
#ifndef SMOL_PACK_H
#define SMOL_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "failure.h"

/* The archive leaves in chunks of at most this many bytes. */
#define PACK_CHUNK (1024u * 1024)

/* One path to pack. */
typedef struct pack_item {
  int area_fd;             /* the session area it is in (not closed) */
  const char *rel;         /* its path beneath that area ("." for the area) */
  int dirfd;               /* the directory holding it (not closed) */
  const char *name;        /* its name in dirfd; NULL: dirfd itself */
  const char *member;      /* its name in the archive; "": a directory whose entries go at the top */
} pack_item;

/* Where the archive goes. */
typedef struct pack_sink {
  /* Takes over data (malloc'ed, len > 0 bytes); false to stop packing (the sink frees data either way). */
  bool (*take)(void *ctx, char *data, size_t len);
  void *ctx;
} pack_sink;

typedef struct pack_stats {
  uint64_t entries;        /* entries written */
  uint64_t bytes;          /* archive bytes handed to the sink */
} pack_stats;

/* Packs the items in order. False with f filled (a sink that stops fails it too; its owner knows why). */
bool pack(const pack_item *items, size_t n, bool follow_links, const pack_sink *sink, pack_stats *st, failure *f);

#endif
