/* A tiny calculator library: the program the demo workflow builds and tests. */
#ifndef CALC_H
#define CALC_H

long calc_add(long a, long b);
long calc_mul(long a, long b);
/* Evaluates "A op B" with op one of + - * /; returns 0 and sets *out, or -1. */
int calc_eval(const char *expr, long *out);

#endif
