/* calc "A op B": prints the result. */
#include "calc.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    long result;
    if (argc != 2 || calc_eval(argv[1], &result) != 0) {
        fprintf(stderr, "usage: calc \"A op B\" (op: + - * /)\n");
        return 2;
    }
    printf("%ld\n", result);
    return 0;
}
