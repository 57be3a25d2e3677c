/*
** Members of process groups are found in /proc (a group has no handle of
** its own) and watched through pidfds (see group_wait.h).
*/
#define _GNU_SOURCE
#include "group_wait.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct watch_set {
  struct pollfd *fds;
  size_t n, cap;
} watch_set;

bool proc_read_stat(const char *path, proc_stat *st) {
  char buf[512];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0) return false;
  buf[len] = '\0';
  /* "pid (comm) S ppid pgrp session tty tpgid flags ... num_threads ...": comm may hold anything, so parse after its last ')'. */
  const char *end = strrchr(buf, ')');
  long pp, pg, threads;
  if (!end || sscanf(end + 1, " %c %ld %ld %*s %*s %*s %u %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %ld",
                     &st->state, &pp, &pg, &st->flags, &threads) != 5)
    return false;
  st->ppid = (pid_t)pp;
  st->pgrp = (pid_t)pg;
  st->threads = threads;
  return true;
}

bool proc_running_stat(pid_t pid, pid_t *ppid, pid_t *pgrp) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  proc_stat st;
  if (!proc_read_stat(path, &st)) return false;
  /* A leader that ended while other threads run shows as a zombie: the process runs on. */
  if ((st.state == 'Z' || st.state == 'X') && st.threads <= 1) return false;
  *ppid = st.ppid;
  *pgrp = st.pgrp;
  return true;
}

bool groups_contain(const pid_t *groups, size_t n, pid_t pgrp) {
  for (size_t i = 0; i < n; i++)
    if (groups[i] == pgrp) return true;
  return false;
}

/* Is the process pid running (not a zombie) in one of the groups? */
static bool running_member(pid_t pid, const pid_t *groups, size_t n) {
  pid_t ppid, pgrp;
  return proc_running_stat(pid, &ppid, &pgrp) && groups_contain(groups, n, pgrp);
}

bool group_still_ours(pid_t pgid) {
  return kill(pgid, 0) < 0 && errno == ESRCH;
}

static void watch_add(watch_set *w, int pidfd) {
  if (w->n == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 16;
    w->fds = realloc(w->fds, w->cap * sizeof *w->fds);
  }
  w->fds[w->n++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
}

void proc_each(bool (*fn)(pid_t pid, int pidfd, void *ctx), void *ctx) {
  DIR *d = opendir("/proc");
  if (!d) return;
  pid_t self = getpid();
  for (struct dirent *e; (e = readdir(d));) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    pid_t pid = (pid_t)atol(e->d_name);
    if (pid == self) continue;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd >= 0 && !fn(pid, pidfd, ctx)) close(pidfd);
  }
  closedir(d);
}

bool proc_env_has(pid_t pid, const char *want, bool prefix) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
  FILE *f = fopen(path, "re");
  if (!f) return false;
  bool found = false;
  char *entry = NULL;
  size_t cap = 0, wlen = strlen(want);
  while (!found && getdelim(&entry, &cap, '\0', f) > 0)
    found = prefix ? strncmp(entry, want, wlen) == 0 : strcmp(entry, want) == 0;
  free(entry);
  fclose(f);
  return found;
}

typedef struct members {
  watch_set *w;
  const pid_t *groups;
  size_t n;
} members;

static bool watch_member(pid_t pid, int pidfd, void *ctx) {
  members *m = ctx;
  if (!running_member(pid, m->groups, m->n)) return false;
  watch_add(m->w, pidfd);
  return true;
}

bool groups_any_left(const pid_t *groups, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (kill(-groups[i], 0) == 0 || errno != ESRCH) return true;
  return false;
}

static long ms_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

/* Drops the watches whose process has exited; returns how many are left. */
static size_t drop_exited(watch_set *w) {
  size_t kept = 0;
  for (size_t i = 0; i < w->n; i++) {
    if (w->fds[i].revents) close(w->fds[i].fd);
    else w->fds[kept++] = w->fds[i];
  }
  w->n = kept;
  return kept;
}

/* Waits for the watched processes (see pidfds_await_gone); frees w. */
static size_t await_watched(watch_set *w, int timeout_ms) {
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (long waited = 0; w->n > 0 && waited < timeout_ms; waited = ms_since(&start)) {
    int rc = poll(w->fds, w->n, (int)(timeout_ms - waited));
    if (rc < 0 && errno != EINTR) break;
    if (rc > 0) drop_exited(w);
  }
  size_t left = w->n;
  for (size_t i = 0; i < w->n; i++) close(w->fds[i].fd);
  free(w->fds);
  return left;
}

size_t groups_await_gone(const pid_t *groups, size_t n, int timeout_ms) {
  if (!groups_any_left(groups, n)) return 0;   /* the common case: no /proc walk */
  watch_set w = {0};
  members m = {&w, groups, n};
  proc_each(watch_member, &m);
  return await_watched(&w, timeout_ms);
}

size_t pidfds_await_gone(const int *pidfds, size_t n, int timeout_ms) {
  watch_set w = {0};
  for (size_t i = 0; i < n; i++) watch_add(&w, pidfds[i]);
  return await_watched(&w, timeout_ms);
}
