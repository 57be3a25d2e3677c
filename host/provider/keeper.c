/*
** The keeper (see keeper.h).
*/
#define _GNU_SOURCE
#include "keeper.h"

#include "group_wait.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Rounds of killing: a process a killed parent forked meanwhile is found by the next one. */
#define MAX_ROUNDS 20
#define ROUND_PAUSE_NS (20 * 1000 * 1000)

int keeper_start(const char *root) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  int fds[2];
  if (n <= 0 || pipe2(fds, O_CLOEXEC) < 0) return -1;
  exe[n] = '\0';
  posix_spawn_file_actions_t acts;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&acts);
  posix_spawn_file_actions_adddup2(&acts, fds[0], 0);
  posix_spawn_file_actions_addopen(&acts, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&acts, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_init(&attr);
  /* Its own group: a signal to the provider's group must not take the keeper with it. */
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  char *argv[] = {exe, "keeper", (char *)root, NULL};
  char *envp[] = {NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &acts, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&acts);
  posix_spawnattr_destroy(&attr);
  close(fds[0]);
  if (rc != 0) { close(fds[1]); return -1; }
  return fds[1];
}

/* ===== the keeper's side ===== */

typedef struct round {
  const char *want;        /* "TMPDIR=ROOT/" */
  size_t found;
} round;

static bool kill_if_in_root(pid_t pid, int pidfd, void *ctx) {
  round *r = ctx;
  if (!proc_env_has(pid, r->want, true)) return false;
  syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
  r->found++;
  return false;
}

/* Kills the processes of local sessions under root; returns how many it found. */
static size_t kill_round(const char *want) {
  round r = {want, 0};
  proc_each(kill_if_in_root, &r);
  return r.found;
}

int keeper_main(int argc, char **argv) {
  if (argc != 3 || argv[2][0] != '/') {
    fprintf(stderr, "smolwf-provider keeper: started only by smolwf-provider itself\n");
    return 2;
  }
  prctl(PR_SET_NAME, "smolwf-keeper");   /* not to be taken for a provider in ps or /proc/PID/comm */
  char want[PATH_MAX + 16];
  snprintf(want, sizeof want, "TMPDIR=%s/", argv[2]);
  for (;;) {   /* until the provider is gone: nothing is ever written, so only the end returns */
    char byte;
    ssize_t n = read(0, &byte, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  for (int round = 0; round < MAX_ROUNDS && kill_round(want) > 0; round++) {
    struct timespec pause = {0, ROUND_PAUSE_NS};
    nanosleep(&pause, NULL);
  }
  return 0;
}
