/*
** What an exec through a provider pays and the plain posix_spawn loop does
** not, before any code of smolwf's runs. bench/provider_bench.lua reads
** the two medians this prints (µs) and adds them up into a floor:
**
**   smolwf-bench-exec-floor [N]        (default N = 5000)
**
**   pipes_us  the two capture pipes of an exec: pipe2 twice and their four
**             ends closed, as the provider does for every exec that
**             returns stdout and stderr (the plain loop sends both to
**             /dev/null);
**   hop_us    one round trip between two processes on one CPU over a pipe
**             pair: each relay on the way (host -> provider -> host, and
**             in a bubblewrap session provider -> helper -> provider)
**             costs at least that. Both processes are pinned to the CPU
**             this one starts on, as the relays keep to one CPU
**             (relay_sched.h); across CPUs a wake-up on a VM costs tens
**             of µs more.
** Both are lower bounds: measured in a tight loop, with warm caches. In
** an exec loop every relay wakes after the command's start has run over
** the caches: a `perf sched` timeline of smolwf-bench-bwrap-exec (pinned)
** shows the helper taking 35 µs (median) from being woken by a START to
** its fork, and 23 µs from a command's exit to the EXITED it sends, where
** the hop here is about 5.
*/
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "median.h"

static void die(const char *what) {
  perror(what);
  exit(1);
}

static double pipes_us(void) {
  int out[2], err[2];
  double t0 = now_us();
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) die("exec_floor: pipe2");
  close(out[1]);
  close(err[1]);
  close(out[0]);
  close(err[0]);
  return now_us() - t0;
}

/* The far side of the hop: answers every byte with a byte until end of file. */
static void echo(int in, int out) {
  char c;
  while (read(in, &c, 1) == 1)
    if (write(out, &c, 1) != 1) _exit(1);
  _exit(0);
}

static double hop_us(int to, int from) {
  char c = 'x';
  double t0 = now_us();
  if (write(to, &c, 1) != 1 || read(from, &c, 1) != 1) die("exec_floor: hop");
  return now_us() - t0;
}

static void pin_to_this_cpu(void) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) die("exec_floor: sched_setaffinity");
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 5000;
  if (n < 1) { fprintf(stderr, "usage: %s [N]\n", argv[0]); return 2; }
  double *t = malloc(sizeof *t * (size_t)n);
  if (!t) die("exec_floor: malloc");
  for (long i = 0; i < n; i++) t[i] = pipes_us();
  printf("pipes_us %.2f\n", bench_median(t, (size_t)n));

  pin_to_this_cpu();   /* before the fork: the echo inherits it */
  int to_echo[2], from_echo[2];
  if (pipe(to_echo) != 0 || pipe(from_echo) != 0) die("exec_floor: pipe");
  pid_t pid = fork();
  if (pid < 0) die("exec_floor: fork");
  if (pid == 0) { close(to_echo[1]); close(from_echo[0]); echo(to_echo[0], from_echo[1]); }
  close(to_echo[0]);
  close(from_echo[1]);
  for (long i = 0; i < n; i++) t[i] = hop_us(to_echo[1], from_echo[0]);
  close(to_echo[1]);
  waitpid(pid, NULL, 0);
  printf("hop_us %.2f\n", bench_median(t, (size_t)n));
  free(t);
  return 0;
}
