/* Per-op cost through the C ABI (the (a) column of `make bench`).
 * Prints one line per op: "<name> <ns per call>", best of 7 rounds. */
#define _POSIX_C_SOURCE 199309L
#include <string.h>
#include "bench.h"

typedef int64_t (*op_fn)(const int64_t *in);

static int64_t op_zeros(const int64_t *in) { return enkai_tensor_zeros("[4]", "fp32", in[0]); }

static int64_t op_add(const int64_t *in) { return enkai_tensor_add(in[0], in[1]); }
/* The same add through the generic entry, as a scripting host calls it. */
static int64_t op_generic_add(const int64_t *in) {
    int64_t out;
    return enkai_op("add", in, 2, NULL, &out, 1) == 1 ? out : 0;
}
static int64_t op_matmul(const int64_t *in) { return enkai_tensor_matmul(in[0], in[1]); }
static int64_t op_ln_gelu(const int64_t *in) {
    int64_t y = enkai_tensor_layernorm(in[0], in[1], in[2], 1e-5);
    int64_t z = enkai_tensor_gelu(y);
    enkai_tensor_free(y);
    return z;
}

static void bench(const char *name, op_fn f, const int64_t *in, int iters) {
    double best = 1e30;
    for (int i = 0; i < iters / 10; i++) enkai_tensor_free(must(f(in)));
    for (int r = 0; r < 7; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) enkai_tensor_free(f(in));
        double per = (now_ns() - t0) / iters;
        if (per < best) best = per;
    }
    printf("%s %.1f\n", name, best);
}

/* `ops_c count <n>` runs each count_* loop n times untimed, for
 * callgrind's instruction counts (the noise-free column of `make bench`). */
__attribute__((noinline)) static void count_zeros_4(int64_t dev, int n) {
    for (int i = 0; i < n; i++) enkai_tensor_free(must(enkai_tensor_zeros("[4]", "fp32", dev)));
}

__attribute__((noinline)) static void count_add_4(const int64_t *in, int n) {
    for (int i = 0; i < n; i++) enkai_tensor_free(must(enkai_tensor_add(in[0], in[1])));
}

__attribute__((noinline)) static void count_op_add_4(const int64_t *in, int n) {
    for (int i = 0; i < n; i++) enkai_tensor_free(must(op_generic_add(in)));
}

int main(int argc, char **argv) {
    int64_t dev = must(enkai_tensor_device("cpu"));
    int64_t a4[2] = {must(enkai_tensor_randn("[4]", "fp32", dev)), must(enkai_tensor_randn("[4]", "fp32", dev))};
    int64_t m64[2] = {must(enkai_tensor_randn("[64,64]", "fp32", dev)), must(enkai_tensor_randn("[64,64]", "fp32", dev))};
    int64_t ln[3] = {must(enkai_tensor_randn("[32,256]", "fp32", dev)), must(enkai_tensor_ones("[256]", "fp32", dev)),
                     must(enkai_tensor_zeros("[256]", "fp32", dev))};
    if (argc == 3 && strcmp(argv[1], "count") == 0) {
        /* One warm-up call of each op first, as the timed bench's warm-up
         * rounds: the counts are per-call costs, not one-time start-up
         * (libtorch's first dispatch, the op table's parse, the first
         * resolution of a name and kwargs). */
        enkai_tensor_free(must(op_zeros(&dev)));
        enkai_tensor_free(must(op_add(a4)));
        enkai_tensor_free(must(op_generic_add(a4)));
        count_zeros_4(dev, atoi(argv[2]));
        count_add_4(a4, atoi(argv[2]));
        count_op_add_4(a4, atoi(argv[2]));
        return 0;
    }
    bench("zeros_4", op_zeros, &dev, 200000);
    bench("add_4", op_add, a4, 200000);
    bench("op_add_4", op_generic_add, a4, 200000);
    bench("matmul_64", op_matmul, m64, 20000);
    bench("layernorm_gelu_32x256", op_ln_gelu, ln, 5000);
    return 0;
}
