/* `make bench`, native backend: each case timed on the torch backend and on
 * the native (cpu) backend in this one process, same thread count, and the
 * ratio printed. Best of 11 rounds, the two backends in alternation. */
#define _POSIX_C_SOURCE 199309L
#include <string.h>
#include "bench.h"

/* The inputs of one case, made on the active backend. */
typedef struct {
    int64_t t[4];
} inputs;

typedef void (*setup_fn)(inputs *in, int64_t dev);
typedef void (*step_fn)(const inputs *in);

static void free_all(inputs *in) {
    for (int i = 0; i < 4; i++)
        if (in->t[i]) enkai_tensor_free(in->t[i]);
}

static void setup_add(inputs *in, int64_t dev) {
    in->t[0] = must(enkai_tensor_randn("[4]", "fp32", dev));
    in->t[1] = must(enkai_tensor_randn("[4]", "fp32", dev));
}
static void step_add(const inputs *in) { enkai_tensor_free(must(enkai_tensor_add(in->t[0], in->t[1]))); }

static void setup_mm(inputs *in, int64_t dev) {
    in->t[0] = must(enkai_tensor_randn("[512,512]", "fp32", dev));
    in->t[1] = must(enkai_tensor_randn("[512,512]", "fp32", dev));
}
static void step_mm(const inputs *in) { enkai_tensor_free(must(enkai_tensor_matmul(in->t[0], in->t[1]))); }

/* Forward, a scalar loss, backward: the loss is sum(y * r) so every output matters. */
static void loss_backward(int64_t y, int64_t r) {
    int64_t p = must(enkai_tensor_mul(y, r));
    int64_t l = must(enkai_tensor_sum(p, -1, 0));
    ok(enkai_tensor_backward(l));
    enkai_tensor_free(l);
    enkai_tensor_free(p);
    enkai_tensor_free(y);
}

static void setup_ln(inputs *in, int64_t dev) {
    in->t[0] = enkai_tensor_require_grad(must(enkai_tensor_randn("[32,256]", "fp32", dev)));
    in->t[1] = enkai_tensor_require_grad(must(enkai_tensor_ones("[256]", "fp32", dev)));
    in->t[2] = enkai_tensor_require_grad(must(enkai_tensor_zeros("[256]", "fp32", dev)));
    in->t[3] = must(enkai_tensor_randn("[32,256]", "fp32", dev));
}
static void step_ln(const inputs *in) {
    int64_t y = must(enkai_tensor_layernorm(in->t[0], in->t[1], in->t[2], 1e-5));
    int64_t z = must(enkai_tensor_gelu(y));
    enkai_tensor_free(y);
    loss_backward(z, in->t[3]);
}

static void setup_sm(inputs *in, int64_t dev) {
    in->t[0] = enkai_tensor_require_grad(must(enkai_tensor_randn("[64,512]", "fp32", dev)));
    in->t[1] = must(enkai_tensor_randn("[64,512]", "fp32", dev));
}
static void step_sm(const inputs *in) { loss_backward(must(enkai_tensor_softmax(in->t[0], -1)), in->t[1]); }

static void setup_ce(inputs *in, int64_t dev) {
    in->t[0] = enkai_tensor_require_grad(must(enkai_tensor_randn("[512,256]", "fp32", dev)));
    uint32_t ids[512];
    for (int i = 0; i < 512; i++) ids[i] = (uint32_t)(i * 37 % 256);
    int64_t t = must(enkai_tensor_ids_u32(ids, 512, 1, 512, dev));
    in->t[1] = must(enkai_tensor_reshape(t, "[512]"));
    enkai_tensor_free(t);
}
static void step_ce(const inputs *in) {
    int64_t l = must(enkai_tensor_cross_entropy(in->t[0], in->t[1]));
    ok(enkai_tensor_backward(l));
    enkai_tensor_free(l);
}

/* Best ns per step on each backend. The rounds alternate the two backends,
 * so that a change in the machine's speed (a shared host's neighbours take
 * its caches and memory for seconds at a time) falls on both sides alike
 * instead of on whichever ran second. */
static const char *const backends[2] = {"torch", "cpu"};
enum { ROUNDS = 11 };

static void timed(setup_fn setup, step_fn step, int iters, double best[2]) {
    inputs in[2] = {{{0, 0, 0, 0}}, {{0, 0, 0, 0}}};
    int64_t dev[2];
    for (int b = 0; b < 2; b++) {
        ok(enkai_backend_set(backends[b]));
        dev[b] = must(enkai_tensor_device("cpu"));
        setup(&in[b], dev[b]);
        for (int i = 0; i < iters / 10 + 1; i++) step(&in[b]);
        best[b] = 1e30;
    }
    for (int r = 0; r < ROUNDS; r++)
        for (int b = 0; b < 2; b++) {
            ok(enkai_backend_set(backends[b]));
            double t0 = now_ns();
            for (int i = 0; i < iters; i++) step(&in[b]);
            double per = (now_ns() - t0) / iters;
            if (per < best[b]) best[b] = per;
        }
    for (int b = 0; b < 2; b++) {
        ok(enkai_backend_set(backends[b]));
        free_all(&in[b]);
        enkai_tensor_device_free(dev[b]);
    }
}

/* The fp32 FMA peak of one core in GFLOP/s (benches/fma_peak, measured in
 * the same run and passed as argv[1]); 0 when not given. */
static double peak;

static void row(const char *what, setup_fn setup, step_fn step, int iters, double flops, int threads) {
    double best[2];
    timed(setup, step, iters, best);
    double t = best[0], n = best[1];
    if (flops > 0 && peak > 0)
        printf("%-44s %10.1f %10.1f %8.2fx   (GFLOP/s; >1 = native faster; native %.0f%%, torch %.0f%% of the FMA peak)\n",
               what, flops / t, flops / n, t / n, 100 * flops / n / (peak * threads), 100 * flops / t / (peak * threads));
    else if (flops > 0)
        printf("%-44s %10.1f %10.1f %8.2fx   (GFLOP/s; >1 = native faster)\n", what, flops / t, flops / n, t / n);
    else
        printf("%-44s %10.0f %10.0f %8.2fx   (ns; <1 = native faster)\n", what, t, n, n / t);
}

int main(int argc, char **argv) {
    if (argc > 1) peak = atof(argv[1]);
    if (peak > 0) printf("fp32 FMA peak, 1 thread (widest vector FMA, registers only): %.1f GFLOP/s\n", peak);
    printf("%-44s %10s %10s %9s\n", "what", "torch", "native", "ratio");
    ok(enkai_set_num_threads(1));
    row("add [4] fp32 (+free), 1 thread", setup_add, step_add, 200000, 0, 1);
    row("matmul 512^3 fp32, 1 thread", setup_mm, step_mm, 20, 2.0 * 512 * 512 * 512, 1);
    ok(enkai_set_num_threads(2));
    row("matmul 512^3 fp32, 2 threads", setup_mm, step_mm, 20, 2.0 * 512 * 512 * 512, 2);
    ok(enkai_set_num_threads(1));
    row("layernorm+gelu fwd+bwd 32x256, 1 thread", setup_ln, step_ln, 2000, 0, 1);
    row("softmax fwd+bwd 64x512, 1 thread", setup_sm, step_sm, 2000, 0, 1);
    row("cross_entropy fwd+bwd 512x256, 1 thread", setup_ce, step_ce, 500, 0, 1);
    return 0;
}
