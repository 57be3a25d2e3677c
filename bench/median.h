/* The median the bench programs report: sorts the samples in place. */
#ifndef SMOL_BENCH_MEDIAN_H
#define SMOL_BENCH_MEDIAN_H

#include <stdlib.h>

static inline int bench_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The middle sample (the upper one of an even count) of v[0..n-1], n > 0. */
static inline double bench_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, bench_by_value);
  return v[n / 2];
}

#endif
