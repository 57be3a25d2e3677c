#include "calc.h"

#include <stdio.h>

long calc_add(long a, long b) { return a + b; }

long calc_mul(long a, long b) { return a * b; }

int calc_eval(const char *expr, long *out)
{
    long a, b;
    char op;
    if (sscanf(expr, "%ld %c %ld", &a, &op, &b) != 3)
        return -1;
    switch (op) {
    case '+': *out = calc_add(a, b); return 0;
    case '-': *out = a - b; return 0;
    case '*': *out = calc_mul(a, b); return 0;
    case '/': if (b == 0) return -1; *out = a / b; return 0;
    default: return -1;
    }
}
