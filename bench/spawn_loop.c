/*
** The baseline for the provider benchmark: starts a command N times with a
** plain posix_spawn + waitpid loop (posix_spawn uses CLONE_VFORK, the
** cheapest way to start a process) and prints the per-start times.
**
**   smolwf-bench-spawn-loop N PROGRAM [ARGS...]
**     prints one line: "n=N median_us=X mean_us=Y p10_us=A p90_us=B".
**   smolwf-bench-spawn-loop --serve PROGRAM [ARGS...]
**     serves batches (batches.h): for each count K read on stdin, starts
**     the command K times and answers their start-to-reaped times in µs,
**     as exec_client.c does for execs through a provider.
**
** stdout/stderr of the command go to /dev/null so only process start and
** exit are measured.
*/
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "batches.h"

extern char **environ;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One start-to-reaped run of argv; its duration in µs, or -1 on failure. */
static double run_once(char **argv, const posix_spawn_file_actions_t *fa) {
  double t0 = now_us();
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], fa, NULL, argv, environ);
  if (rc != 0) {
    fprintf(stderr, "spawn_loop: cannot start %s: %s\n", argv[0], strerror(rc));
    return -1;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "spawn_loop: %s did not exit 0 (status %d)\n", argv[0], status);
    return -1;
  }
  return now_us() - t0;
}

static void print_stats(double *samples, long n) {
  double sum = 0;
  for (long i = 0; i < n; i++) sum += samples[i];
  qsort(samples, (size_t)n, sizeof *samples, cmp_double);
  printf("n=%ld median_us=%.1f mean_us=%.1f p10_us=%.1f p90_us=%.1f\n", n,
         samples[n / 2], sum / (double)n, samples[n / 10], samples[n * 9 / 10]);
}

/* Runs argv n times into samples; 0, or 1 after a failed start. */
static int run_n(char **argv, const posix_spawn_file_actions_t *fa, double *samples, long n) {
  for (long i = 0; i < n; i++) {
    samples[i] = run_once(argv, fa);
    if (samples[i] < 0) return 1;
  }
  return 0;
}

static int loop(char **argv, const posix_spawn_file_actions_t *fa, long n) {
  double *samples = malloc((size_t)n * sizeof *samples);
  int status = samples ? run_n(argv, fa, samples, n) : 1;
  if (status == 0) print_stats(samples, n);
  free(samples);
  return status;
}

typedef struct start { char **argv; const posix_spawn_file_actions_t *fa; } start;

static double run_start(void *ctx) {
  const start *st = ctx;
  return run_once(st->argv, st->fa);
}

int main(int argc, char **argv) {
  bool serving = argc > 2 && strcmp(argv[1], "--serve") == 0;
  long n = argc > 2 && !serving ? strtol(argv[1], NULL, 10) : 0;
  if (!serving && n <= 0) {
    fprintf(stderr, "usage: %s N PROGRAM [ARGS...]\n       %s --serve PROGRAM [ARGS...]\n",
            argv[0], argv[0]);
    return 2;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  start st = {argv + 2, &fa};
  int status = serving ? serve_batches("spawn_loop", run_start, &st) : loop(argv + 2, &fa, n);
  posix_spawn_file_actions_destroy(&fa);
  return status;
}
