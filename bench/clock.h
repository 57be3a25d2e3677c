/* The clock the bench programs time with: monotonic, in µs. */
#ifndef SMOL_BENCH_CLOCK_H
#define SMOL_BENCH_CLOCK_H

#include <time.h>

static inline double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

#endif
