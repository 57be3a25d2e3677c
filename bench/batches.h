/*
** The --serve side of the exec baselines (spawn_loop.c, exec_client.c):
** reads a count K per line on stdin, runs K starts one after the other
** and answers one line with their K times in µs; returns at end of input.
** bench/provider_bench.lua drives several such servers in alternating
** rounds, so every side is measured under the same moment's conditions.
*/
#ifndef SMOL_BENCH_BATCHES_H
#define SMOL_BENCH_BATCHES_H

#include <stdio.h>

#define MAX_BATCH 1000

/* One start to its end: µs, or a negative number after a failure (already reported). */
typedef double (*run_one_fn)(void *ctx);

/* 0 at end of input, 1 after a failed start, 2 for a bad count. */
static inline int serve_batches(const char *who, run_one_fn run_one, void *ctx) {
  static double samples[MAX_BATCH];
  long k;
  while (scanf("%ld", &k) == 1) {
    if (k < 1 || k > MAX_BATCH) {
      fprintf(stderr, "%s: a batch is 1 to %d starts, not %ld\n", who, MAX_BATCH, k);
      return 2;
    }
    for (long i = 0; i < k; i++)
      if ((samples[i] = run_one(ctx)) < 0) return 1;
    for (long i = 0; i < k; i++) printf(i ? " %.1f" : "%.1f", samples[i]);
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

#endif
