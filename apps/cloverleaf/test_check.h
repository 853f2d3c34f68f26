/* What the CloverLeaf tests share: CHECK(cond, fmt, ...) prints a FAIL line
 * naming the file and line and counts it in the including file's
 * `failures` (each test program declares `static int failures;` before
 * including this); the run goes on. */
#ifndef CLOVER_TEST_CHECK_H
#define CLOVER_TEST_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            failures++;                                                          \
        }                                                                        \
    } while (0)

#endif
