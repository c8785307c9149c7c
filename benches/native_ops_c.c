/* The native column of benches/native_ops_compare.py: ops through the
 * generic entry `enkai_op`, on the native backend, 1 thread. Prints one
 * line per op: "<name> <ns per call>" (op + free of its results), best of
 * 7 rounds. Built against the libtorch-free library, whose one backend is
 * the native one; `enkai_backend_set("cpu")` says so all the same. */
#define _POSIX_C_SOURCE 199309L
#include <string.h>
#include "bench.h"

/* One case: an op by its PyTorch name, its tensor inputs and kwargs. */
typedef struct {
    const char *name, *op, *kwargs;
    int64_t in[2];
    size_t n_in;
    int iters;
} op_case;

static void call(const op_case *c) {
    int64_t out[2];
    int64_t n = enkai_op(c->op, c->in, c->n_in, c->kwargs, out, 2);
    if (n < 0) {
        fprintf(stderr, "bench: %s: %s\n", c->op, enkai_tensor_last_error());
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) enkai_tensor_free(out[i]);
}

static void bench(const op_case *c) {
    for (int i = 0; i < c->iters / 10 + 1; i++) call(c);
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        double t0 = now_ns();
        for (int i = 0; i < c->iters; i++) call(c);
        double per = (now_ns() - t0) / c->iters;
        if (per < best) best = per;
    }
    printf("%s %.1f\n", c->name, best);
}

/* An int64 tensor of `n` values in [0, high), from a fixed LCG. */
static int64_t random_index(size_t n, int64_t high, const char *shape, int64_t dev) {
    int64_t *v = malloc(n * sizeof *v);
    if (!v) exit(1);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int64_t)((s >> 33) % (uint64_t)high);
    }
    int64_t t = must(enkai_tensor_from_data(v, n * sizeof *v, shape, "int64", dev));
    free(v);
    return t;
}

/* `native_ops_c [name [iters]]`: only the case `name`, with `iters` calls per round. */
int main(int argc, char **argv) {
    ok(enkai_backend_set("cpu"));
    ok(enkai_set_num_threads(1));
    int64_t dev = must(enkai_tensor_device("cpu"));
    int64_t x = must(enkai_tensor_randn("[512,4096]", "fp32", dev));
    int64_t logits = must(enkai_tensor_randn("[64,32000]", "fp32", dev));
    int64_t table = must(enkai_tensor_randn("[4096,1024]", "fp32", dev));
    int64_t gidx = random_index(4096 * 64, 1024, "[4096,64]", dev);
    int64_t sidx = random_index(1024, 4096, "[1024]", dev);
    op_case cases[] = {
        {"sum_dim1", "sum", "{\"dim\": [1]}", {x, 0}, 1, 200},
        {"softmax_dim0", "softmax", "{\"dim\": 0}", {x, 0}, 1, 50},
        {"topk_50", "topk", "{\"k\": 50}", {logits, 0}, 1, 100},
        {"gather_dim1", "gather", "{\"dim\": 1}", {table, gidx}, 2, 500},
        {"index_select_dim0", "index_select", "{\"dim\": 0}", {table, sidx}, 2, 200},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
        if (argc > 2) cases[i].iters = atoi(argv[2]);
        bench(&cases[i]);
    }
    int64_t all[] = {x, logits, table, gidx, sidx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) enkai_tensor_free(all[i]);
    enkai_tensor_device_free(dev);
    return 0;
}
