/*
** The baseline for the provider benchmark: a command started with a plain
** posix_spawn + waitpid loop (posix_spawn uses CLONE_VFORK, the cheapest
** way to start a process).
**
**   smolwf-bench-spawn-loop --serve PROGRAM [ARGS...]
**
** Serves batches (batches.h): for each count K read on stdin, starts the
** command K times and answers their start-to-reaped times in µs, as
** exec_client.c does for execs through a provider. stdout/stderr of the
** command go to /dev/null so only process start and exit are measured.
*/
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "batches.h"
#include "clock.h"

extern char **environ;

typedef struct start { char **argv; const posix_spawn_file_actions_t *fa; } start;

/* One start-to-reaped run of the command; its duration in µs, or -1 on failure. */
static double run_start(void *ctx) {
  char **argv = ((const start *)ctx)->argv;
  double t0 = now_us();
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], ((const start *)ctx)->fa, NULL, argv, environ);
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

int main(int argc, char **argv) {
  if (argc < 3 || strcmp(argv[1], "--serve") != 0) {
    fprintf(stderr, "usage: %s --serve PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  start st = {argv + 2, &fa};
  int status = serve_batches("spawn_loop", run_start, &st);
  posix_spawn_file_actions_destroy(&fa);
  return status;
}
