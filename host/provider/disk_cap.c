/*
** Measuring a session's disk use (see disk_cap.h for the policy). The walk
** goes through directory fds (openat with O_NOFOLLOW), so a symlink a
** command planted can neither lead it out of the session nor loop it.
*/
#define _GNU_SOURCE
#include "disk_cap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"
#include "process.h"
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
  count_area(&w, s->written_fd);
  if (!over(&w)) count_area(&w, s->tmp_fd);
  return w.used;
}

bool disk_cap_exceeded(const session *s, uint64_t *used) {
  uint64_t cap = s->profile->limits.disk_bytes;
  *used = cap ? disk_usage(s, cap) : 0;
  return cap && *used > cap;
}

/* ===== the disk watch ===== */

typedef struct disk_watch {
  uv_timer_t timer;           /* data: the session; runs while commands run */
  bool over;                  /* commands were killed for it: refuse new ones until back under */
} disk_watch;

void disk_watch_open(session *s) {
  if (!s->profile->limits.disk_bytes || s->disk) return;
  s->disk = ctx_alloc(sizeof *s->disk);
  uv_timer_init(provider_ctx()->loop, &s->disk->timer);
  s->disk->timer.data = s;
}

/* Over the allowance: every running command of the session is killed. */
static void check(session *s) {
  uint64_t used;
  if (!disk_cap_exceeded(s, &used)) return;
  if (!s->disk->over)
    fprintf(stderr, "smolwf-provider: session %s uses %llu bytes, over its disk cap of %llu: "
            "killing its commands\n", s->id, (unsigned long long)used,
            (unsigned long long)s->profile->limits.disk_bytes);
  s->disk->over = true;
  procs_signal_running(s, SIGKILL);
}

static void on_timer(uv_timer_t *t) {
  check(t->data);
}

void disk_watch_changed(session *s, bool exited) {
  disk_watch *w = s->disk;
  if (!w) return;
  if (exited) check(s);
  bool running = procs_running(s);
  if (running && !uv_is_active((uv_handle_t *)&w->timer))
    uv_timer_start(&w->timer, on_timer, DISK_CHECK_MS, DISK_CHECK_MS);
  else if (!running)
    uv_timer_stop(&w->timer);
}

int disk_watch_allows_start(session *s) {
  uint64_t used;
  if (!s->disk || !s->disk->over) return 0;
  s->disk->over = disk_cap_exceeded(s, &used);
  return s->disk->over ? -EDQUOT : 0;
}

bool disk_watch_allows_write(const session *s, uint64_t adding, uint64_t replacing, uint64_t *used, uint64_t *cap) {
  *cap = s->profile->limits.disk_bytes;
  if (!*cap) return true;
  /* Counting stops a little past the cap: enough to tell, without walking a huge tree. */
  *used = disk_usage(s, *cap + replacing);
  uint64_t after = (*used > replacing ? *used - replacing : 0) + adding;
  return after <= *cap;
}

static void free_watch(uv_handle_t *h) {
  free(h);   /* the timer is the watch's first member */
}

void disk_watch_close(session *s) {
  if (!s->disk) return;
  uv_close((uv_handle_t *)&s->disk->timer, free_watch);
  s->disk = NULL;
}
