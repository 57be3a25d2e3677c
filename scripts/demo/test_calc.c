/* test_calc SUITE: runs one suite of checks ("arith" or "parse"). */
#include "calc.h"

#include <stdio.h>
#include <string.h>

static int failures;

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        failures++;
}

static void suite_arith(void)
{
    check(calc_add(2, 3) == 5, "2 + 3 == 5");
    check(calc_mul(4, -2) == -8, "4 * -2 == -8");
}

static void suite_parse(void)
{
    long r = 0;
    check(calc_eval("6 / 3", &r) == 0 && r == 2, "\"6 / 3\" == 2");
    check(calc_eval("1 / 0", &r) == -1, "\"1 / 0\" is an error");
    check(calc_eval("nonsense", &r) == -1, "\"nonsense\" is an error");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_calc arith|parse\n");
        return 2;
    }
    if (strcmp(argv[1], "arith") == 0)
        suite_arith();
    else if (strcmp(argv[1], "parse") == 0)
        suite_parse();
    else {
        fprintf(stderr, "test_calc: unknown suite '%s'\n", argv[1]);
        return 2;
    }
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
