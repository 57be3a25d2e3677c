/*
** Removing whole trees (see tree.h), of any depth, with a few
** descriptors and constant memory: no recursion, no descriptor per level.
**
** The tree is flattened as it goes. The directory being removed, TOP, is
** held open; each subdirectory D found in TOP is opened, its files are
** unlinked, and each directory inside D is moved up into TOP under a name
** of our own (renameat2 with RENAME_NOREPLACE, numbered); then D is empty
** and goes. The moved directories are taken next, by number, so a chain
** 5000 levels deep costs 5000 moves and never more than three open
** directories. Everything happens through directory fds and *at() calls
** with O_NOFOLLOW, and nothing moves out of TOP, so a link in the tree is
** never followed and a link swapped in mid-walk fails an open instead of
** leading elsewhere. No step uses "..".
**
** Commands may still be writing while `remove` runs: TOP is listed again
** until it is found empty, or a pass makes no progress (then the first
** error says why, e.g. a mount point below it).
**
** $SMOLWF_PROVIDER_REMOVE_PACE_MS=N makes removal pause N ms after each
** file and directory it removes: a test seam, so specs can act while a
** removal runs, as $SMOLWF_PROVIDER_COPY_PACE_MS does for copies.
*/
#define _GNU_SOURCE
#include "tree.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd_reserve.h"

/* The names directories get when moved up into TOP. */
#define HOISTED "#smolwf-rm.%lu"
/* A pass over TOP that keeps finding new entries (a command still writing) gives up after this many. */
#define MAX_PASSES 1000

typedef struct removal {
  int top;                 /* the directory being emptied */
  unsigned long next;      /* the number the next moved directory gets */
  int err;                 /* the first error (negative errno), 0 while none */
} removal;

static unsigned pace_ms;
static pthread_once_t pace_read = PTHREAD_ONCE_INIT;

static void read_pace(void) {
  const char *pace = getenv("SMOLWF_PROVIDER_REMOVE_PACE_MS");
  pace_ms = pace ? (unsigned)strtoul(pace, NULL, 10) : 0;
}

/* After each entry removed: the test seam's pause, if any. */
static void paced(void) {
  if (pace_ms) usleep(pace_ms * 1000u);
}

static void note(removal *rm, int err) {
  if (rm->err == 0 && err != 0) rm->err = -err;
}

static bool is_dot(const char *name) {
  return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/*
** A command may leave a directory without write or search permission
** (overlay's own work directory is made mode 000); an unprivileged
** provider could then neither empty it nor move it (moving a directory
** rewrites its ".."). Make it 0700, through an O_PATH fd opened without
** following links, so a link swapped in cannot make us chmod something
** outside. False (errno set) when it cannot be reached.
*/
static bool make_own_dir_writable(int dirfd, const char *name) {
  int pathfd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (pathfd < 0) return false;
  char proc_path[64];
  snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", pathfd);
  chmod(proc_path, 0700);
  close(pathfd);
  return true;
}

static int open_dir_for_removal(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 || errno != EACCES) return fd;
  if (!make_own_dir_writable(dirfd, name)) return -1;
  return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Moves directory `name` of dir up into TOP under the next number of our own. */
static bool hoist(removal *rm, int dir, const char *name) {
  bool made_writable = false;
  for (;;) {
    char moved[64];
    snprintf(moved, sizeof moved, HOISTED, rm->next++);
    if (renameat2(dir, name, rm->top, moved, RENAME_NOREPLACE) == 0) return true;
    if (errno == EACCES && !made_writable && make_own_dir_writable(dir, name)) { made_writable = true; continue; }
    if (errno != EEXIST) { note(rm, errno); return false; }
  }
}

/*
** A listing of dir from its start. A dup shares dir's file offset, which
** an earlier listing left at the end: without the rewind a second pass
** over TOP would find it empty.
*/
static DIR *list_from_start(removal *rm, int dir) {
  int fd = dup(dir);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) { note(rm, errno); if (fd >= 0) close(fd); return NULL; }
  rewinddir(d);
  return d;
}

/* Unlinks what dir holds and moves its directories up; true when it changed anything. */
static bool flatten(removal *rm, int dir) {
  DIR *d = list_from_start(rm, dir);
  if (!d) return false;
  fchmod(dir, 0700);
  bool changed = false;
  for (struct dirent *e; (e = readdir(d));) {
    if (is_dot(e->d_name)) continue;
    if (e->d_type != DT_DIR && unlinkat(dir, e->d_name, 0) == 0) { changed = true; paced(); continue; }
    if (e->d_type != DT_DIR && errno != EISDIR) { note(rm, errno); continue; }
    changed |= hoist(rm, dir, e->d_name);
  }
  closedir(d);
  return changed;
}

/* Removes directory `name` of TOP: flattens it into TOP, then removes it. True when anything went. */
static bool take_dir(removal *rm, const char *name) {
  int dir = open_dir_for_removal(rm->top, name);
  if (dir < 0 && errno == ENOENT) return false;   /* listed once more after it was taken */
  if (dir < 0) { note(rm, errno); return false; }
  bool changed = flatten(rm, dir);
  close(dir);
  if (unlinkat(rm->top, name, AT_REMOVEDIR) == 0) { paced(); return true; }
  if (errno != ENOTEMPTY && errno != EEXIST) note(rm, errno);
  return changed;
}

/* Takes the directories moved up since `from` (more are moved meanwhile), by number. */
static bool take_hoisted(removal *rm, unsigned long from) {
  bool changed = false;
  for (unsigned long i = from; i < rm->next; i++) {
    char moved[64];
    snprintf(moved, sizeof moved, HOISTED, i);
    changed |= take_dir(rm, moved);
  }
  return changed;
}

/* One pass over TOP's entries; true when it changed anything, *empty when it found none. */
static bool pass(removal *rm, bool *empty) {
  *empty = false;
  DIR *d = list_from_start(rm, rm->top);
  if (!d) return false;
  *empty = true;
  fchmod(rm->top, 0700);
  bool changed = false;
  for (struct dirent *e; (e = readdir(d));) {
    if (is_dot(e->d_name)) continue;
    *empty = false;
    unsigned long from = rm->next;
    if (e->d_type != DT_DIR && unlinkat(rm->top, e->d_name, 0) == 0) { changed = true; paced(); continue; }
    if (e->d_type != DT_DIR && errno != EISDIR) { note(rm, errno); continue; }
    changed |= take_dir(rm, e->d_name);
    changed |= take_hoisted(rm, from);
  }
  closedir(d);
  return changed;
}

/* Empties the directory open at top. 0 or -errno. */
static int empty_tree(int top) {
  removal rm = {.top = top};
  for (int i = 0; i < MAX_PASSES; i++) {
    bool empty;
    bool changed = pass(&rm, &empty);
    if (empty) return 0;
    if (!changed) break;
    rm.err = 0;   /* it moved on: a later pass may still clear what failed */
  }
  return rm.err ? rm.err : -ENOTEMPTY;
}

static int remove_once(int dirfd, const char *name) {
  if (unlinkat(dirfd, name, 0) == 0) return 0;
  if (errno != EISDIR && errno != EPERM) return -errno;
  int top = open_dir_for_removal(dirfd, name);
  if (top < 0) return -errno;
  int rc = empty_tree(top);
  close(top);
  if (rc == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0) rc = -errno;
  return rc;
}

int tree_remove(int dirfd, const char *name) {
  pthread_once(&pace_read, read_pace);
  int rc = remove_once(dirfd, name);
  if (rc != -EMFILE && rc != -ENFILE) return rc;
  /* Out of descriptors: removal must still happen, so spend the ones kept back for it. */
  fd_reserve_release();
  rc = remove_once(dirfd, name);
  fd_reserve_restore();
  return rc;
}
