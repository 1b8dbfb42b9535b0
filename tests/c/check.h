/* The test programs' one assertion: CHECK(cond, printf-format, ...) prints the message and counts a failure
 * (the program's exit status comes from `failures`), so one run reports every check that failed. */
#ifndef PYCOLL_TEST_CHECK_H
#define PYCOLL_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                                       \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            printf(__VA_ARGS__);                                                                               \
            printf("\n");                                                                                      \
            failures++;                                                                                        \
        }                                                                                                      \
    } while (0)

#endif
