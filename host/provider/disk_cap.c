/*
** Measuring a session's disk use (see disk_cap.h for the policy). The walk
** goes through directory fds (openat with O_NOFOLLOW), so a symlink a
** command planted can neither lead it out of the session nor loop it.
*/
#define _GNU_SOURCE
#include "disk_cap.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session.h"

/* Deeper trees are still counted down to here; past it directories count as themselves only. */
#define MAX_DEPTH 128

typedef struct walk {
  uint64_t used, limit;
  dev_t dev;                  /* the session's filesystem: mounts below are not ours */
} walk;

static bool over(const walk *w) {
  return w->limit && w->used > w->limit;
}

static void count_dir(walk *w, int dirfd, int depth);

static void count_entry(walk *w, int dirfd, const char *name, int depth) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return;   /* removed meanwhile */
  w->used += (uint64_t)st.st_blocks * 512;
  if (!S_ISDIR(st.st_mode) || st.st_dev != w->dev || depth >= MAX_DEPTH) return;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) count_dir(w, fd, depth + 1);   /* count_dir closes fd */
}

/* Counts everything below the directory open at fd, then closes fd. */
static void count_dir(walk *w, int fd, int depth) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *e;
  while (!over(w) && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    count_entry(w, dirfd(d), e->d_name, depth);
  }
  closedir(d);
}

/* Counts the area whose O_PATH dirfd is area_fd. */
static void count_area(walk *w, int area_fd) {
  if (area_fd < 0) return;
  int fd = openat(area_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    if (fd >= 0) close(fd);
    return;
  }
  w->dev = st.st_dev;
  count_dir(w, fd, 0);
}

uint64_t disk_usage(const session *s, uint64_t limit) {
  walk w = {.limit = limit};
  count_area(&w, s->workspace_fd);
  if (!over(&w)) count_area(&w, s->tmp_fd);
  return w.used;
}

bool disk_cap_exceeded(const session *s, uint64_t *used) {
  uint64_t cap = s->profile->limits.disk_bytes;
  *used = cap ? disk_usage(s, cap) : 0;
  return cap && *used > cap;
}
