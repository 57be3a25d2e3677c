/*
** The disk walk (see disk_walk.h).
*/
#define _GNU_SOURCE
#include "disk_walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A walk that keeps being disturbed gives up after this many tries (what it counted stands). */
#define MAX_TRIES 4

/* ===== inodes met already: an open-addressing hash set of (dev, ino) ===== */

typedef struct seen_slot {
  dev_t dev;
  ino_t ino;
  unsigned try;      /* the try of the walk that counted it; 0: an empty slot */
} seen_slot;

typedef struct seen_set {
  seen_slot *slots;
  size_t n, cap;     /* cap: a power of two */
  unsigned try;      /* the current try: a slot of an earlier one counts as not met */
} seen_set;

static size_t slot_of(const seen_set *s, dev_t dev, ino_t ino) {
  uint64_t h = ((uint64_t)ino * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)dev * 0xC2B2AE3D27D4EB4Full);
  size_t i = (size_t)(h >> 17) & (s->cap - 1);
  while (s->slots[i].try && (s->slots[i].dev != dev || s->slots[i].ino != ino)) i = (i + 1) & (s->cap - 1);
  return i;
}

static void seen_grow(seen_set *s) {
  seen_set bigger = {calloc(s->cap ? 2 * s->cap : 64, sizeof(seen_slot)), s->n, s->cap ? 2 * s->cap : 64, s->try};
  if (!bigger.slots) abort();
  for (size_t i = 0; i < s->cap; i++)
    if (s->slots[i].try) bigger.slots[slot_of(&bigger, s->slots[i].dev, s->slots[i].ino)] = s->slots[i];
  free(s->slots);
  *s = bigger;
}

/* Marks (dev, ino) met in this try; false when it was met already. */
static bool seen_first(seen_set *s, dev_t dev, ino_t ino) {
  if (2 * (s->n + 1) > s->cap) seen_grow(s);
  seen_slot *slot = &s->slots[slot_of(s, dev, ino)];
  if (slot->try == s->try) return false;
  if (!slot->try) s->n++;
  *slot = (seen_slot){dev, ino, s->try};
  return true;
}

/* ===== the tally ===== */

void disk_tally_init(disk_tally *t, uint64_t stop_bytes, uint64_t stop_inodes, job *j) {
  *t = (disk_tally){.stop_bytes = stop_bytes, .stop_inodes = stop_inodes, .job = j};
  t->seen = calloc(1, sizeof *t->seen);
  if (!t->seen) abort();
  t->seen->try = 1;
}

void disk_tally_free(disk_tally *t) {
  if (t->seen) free(t->seen->slots);
  free(t->seen);
  t->seen = NULL;
}

bool disk_tally_done(const disk_tally *t) {
  return (t->stop_bytes && t->bytes > t->stop_bytes) || (t->stop_inodes && t->inodes > t->stop_inodes) ||
         (t->job && job_cancelled(t->job));
}

/*
** One name is the common case: only the others need remembering. An empty
** one is remembered only under an inode cap: counted twice it adds no
** bytes, and so what is remembered is bounded by the stop figures (each
** entry took a block or an inode the walk counted).
*/
static bool counted_before(disk_tally *t, const struct stat *st) {
  if (S_ISDIR(st->st_mode) || st->st_nlink == 1 || (st->st_blocks == 0 && !t->stop_inodes)) return false;
  return !seen_first(t->seen, st->st_dev, st->st_ino);
}

void disk_tally_add(disk_tally *t, const struct stat *st) {
  if (counted_before(t, st)) return;
  t->bytes += (uint64_t)st->st_blocks * 512;
  t->inodes++;
}

/* ===== the walk ===== */

/* A directory the walk is inside of, below its area: where its reading goes on. */
typedef struct level {
  dev_t dev;
  ino_t ino;
  long pos;          /* telldir() after the entry being descended into */
} level;

typedef struct walk {
  disk_tally *t;
  dev_t area_dev;
  level *stack;      /* the directories above the current one, outermost first */
  size_t depth, cap;
  DIR *cur;
  struct stat cur_st;
} walk;

static void push(walk *w, level l) {
  if (w->depth == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 64;
    w->stack = realloc(w->stack, w->cap * sizeof *w->stack);
    if (!w->stack) abort();
  }
  w->stack[w->depth++] = l;
}

static void pace(const disk_tally *t) {
  for (unsigned i = 0; i < t->pace_ms && !disk_tally_done(t); i++) usleep(1000);
}

/* Makes the directory open at fd the current one (taking fd); false if it cannot be read. */
static bool enter(walk *w, int fd) {
  struct stat st;
  DIR *d = fstat(fd, &st) == 0 ? fdopendir(fd) : NULL;
  if (!d) {
    close(fd);
    return false;
  }
  w->cur = d;
  w->cur_st = st;
  return true;
}

/* Goes down into the current directory's entry name (a directory of the area's filesystem, st). */
static void descend(walk *w, const char *name, const struct stat *st) {
  int fd = openat(dirfd(w->cur), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat now;
  /* Swapped for something else since the fstatat: that is counted where it is now, if anywhere. */
  if (fd < 0) return;
  if (fstat(fd, &now) < 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) { close(fd); return; }
  level here = {w->cur_st.st_dev, w->cur_st.st_ino, telldir(w->cur)};
  DIR *parent = w->cur;
  if (!enter(w, fd)) return;
  closedir(parent);
  push(w, here);
  pace(w->t);
}

/*
** Back to the parent, where its reading stopped. False when ".." is no
** longer that parent (the directory was moved meanwhile): the walk is disturbed.
*/
static bool climb(walk *w) {
  level up = w->stack[--w->depth];
  int fd = openat(dirfd(w->cur), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  closedir(w->cur);
  w->cur = NULL;
  if (fd < 0 || !enter(w, fd)) return false;
  if (w->cur_st.st_dev != up.dev || w->cur_st.st_ino != up.ino) return false;
  seekdir(w->cur, up.pos);
  return true;
}

static bool is_dot(const char *name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* One try at the area; false when disturbed. */
static bool walk_once(walk *w, int area_fd) {
  int fd = openat(area_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || !enter(w, fd)) return true;   /* nothing there to count */
  w->area_dev = w->cur_st.st_dev;
  w->depth = 0;
  bool undisturbed = true;
  while (w->cur && !disk_tally_done(w->t)) {
    struct dirent *e = readdir(w->cur);
    if (!e) {
      if (w->depth == 0) break;
      if (!(undisturbed = climb(w))) break;
      continue;
    }
    struct stat st;
    if (is_dot(e->d_name) || fstatat(dirfd(w->cur), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    disk_tally_add(w->t, &st);
    if (S_ISDIR(st.st_mode) && st.st_dev == w->area_dev) descend(w, e->d_name, &st);
  }
  if (w->cur) closedir(w->cur);
  w->cur = NULL;
  return undisturbed;
}

void disk_walk_area(disk_tally *t, int area_fd, dev_t *dev) {
  walk w = {.t = t};
  uint64_t bytes = t->bytes, inodes = t->inodes, most_bytes = 0, most_inodes = 0;
  for (int try = 0; try < MAX_TRIES; try++) {
    if (walk_once(&w, area_fd)) { most_bytes = most_inodes = 0; break; }
    /* Disturbed: count again from where this area started, as if nothing had been met. */
    if (t->bytes > most_bytes) most_bytes = t->bytes;
    if (t->inodes > most_inodes) most_inodes = t->inodes;
    t->bytes = bytes;
    t->inodes = inodes;
    t->seen->try++;
  }
  if (most_bytes > t->bytes) t->bytes = most_bytes;
  if (most_inodes > t->inodes) t->inodes = most_inodes;
  *dev = w.area_dev;
  free(w.stack);
}
