/* One TinyLM training step (zero_grad, forward, backward, AdamW) through the
 * C ABI; prints "tinylm_step <ms per step>" (best of 3 timed blocks). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "enkai_tensor.h"

enum { V = 256, D = 128, L = 2, H = 4, B = 8, S = 64 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    int64_t dev = enkai_tensor_device("cpu");
    char *params;
    size_t len;
    if (enkai_tensor_tinylm_init(V, S, D, L, H, dev, 0, &params, &len)) return 1;
    int64_t opt = enkai_opt_adamw_create(params, 1e-3, 0.9, 0.999, 1e-8, 0.01);
    uint32_t in[B * S], tgt[B * S];
    for (int i = 0; i < B * S; i++) in[i] = (uint32_t)(i * 7 % V), tgt[i] = (uint32_t)(i * 13 % V);
    double best = 1e30;
    for (int block = 0; block < 4; block++) {
        double t0 = now();
        for (int i = 0; i < steps; i++) {
            enkai_tensor_zero_grad_multi(params);
            int64_t loss = enkai_tensor_forward_tinylm(params, in, B * S, tgt, B * S, B, S, H);
            if (!loss || enkai_tensor_backward(loss) || enkai_opt_adamw_step(opt)) {
                fprintf(stderr, "%s\n", enkai_tensor_last_error());
                return 1;
            }
            enkai_tensor_free(loss);
        }
        double ms = (now() - t0) * 1e3 / steps;
        if (block > 0 && ms < best) best = ms; /* block 0 warms up */
    }
    printf("tinylm_step %.3f\n", best);
    return 0;
}
