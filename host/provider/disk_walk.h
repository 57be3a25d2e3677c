/*
** Counting what a session's files take on disk: allocated bytes and
** inodes, each inode once. Runs on a job's thread (disk_cap.c), never on
** the loop: it touches nothing but the descriptors and the tally it is given.
**
** The walk is iterative with one directory open at a time: descending
** remembers only where the parent's reading stopped (its device, inode
** and directory position), and climbing back goes through ".." and checks
** that it reached that same directory. So any depth is counted in memory
** proportional to the depth (a few words a level) and three descriptors,
** symlinks are never followed and other filesystems (st_dev) never entered.
*/
#ifndef SMOL_DISK_WALK_H
#define SMOL_DISK_WALK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "job.h"

struct seen_set;

typedef struct disk_tally {
  uint64_t bytes, inodes;
  uint64_t hidden;         /* processes of the session whose open files could not be read (disk_held.h) */
  uint64_t stop_bytes, stop_inodes;   /* counting may stop once past either (0: never) */
  struct seen_set *seen;   /* inodes with other than one name: counted once however often met */
  job *job;                /* stops early once it is cancelled; NULL: never */
  unsigned pace_ms;        /* a pause in each directory entered (a test seam: a walk known to be running) */
} disk_tally;

/* An empty tally that may stop past the given figures (0: count everything). */
void disk_tally_init(disk_tally *t, uint64_t stop_bytes, uint64_t stop_inodes, job *j);
void disk_tally_free(disk_tally *t);

/* Counted past a stop figure, or cancelled: the rest need not be counted. */
bool disk_tally_done(const disk_tally *t);

/* Counts the inode st describes (once, when it has several names or none). */
void disk_tally_add(disk_tally *t, const struct stat *st);

/*
** Counts everything below the directory area_fd names (an O_PATH
** descriptor will do; the directory itself is not counted); *dev gets its
** filesystem. A walk disturbed by a directory moving to another parent
** while the walk is inside it starts over, at most a few times; what was
** counted then stands.
*/
void disk_walk_area(disk_tally *t, int area_fd, dev_t *dev);

#endif
