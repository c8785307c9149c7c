/* What the C benches share: a monotonic clock and a handle check. */
#ifndef ENKAI_BENCH_H
#define ENKAI_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "enkai_tensor.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* `h`, or exit with the library's last error when the call returned 0. */
static int64_t must(int64_t h) {
    if (h == 0) {
        fprintf(stderr, "bench: %s\n", enkai_tensor_last_error());
        exit(1);
    }
    return h;
}

/* A status call's 0, or exit with the library's last error. */
static inline void ok(int rc) {
    if (rc != 0) {
        fprintf(stderr, "bench: %s\n", enkai_tensor_last_error());
        exit(1);
    }
}

#endif
