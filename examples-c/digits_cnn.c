/* digits_cnn: a small CNN trained from C on real images, scikit-learn's
 * 1,797 handwritten 8x8 digits (exported once by scripts/export_digits.py
 * into a binary file: no Python at run time).
 *
 *   conv 3x3 (1->16) -> batch_norm -> relu -> max_pool 2
 *   conv 3x3 (16->32) -> batch_norm -> relu -> max_pool 2 -> linear (128->10)
 *
 * trained with AdamW on cross_entropy, every op by its PyTorch name through
 * `enkai_op`. The parameters are named as a PyTorch module's state_dict
 * (conv1.weight, bn1.running_mean, ...); `--init FILE` reads them from a
 * safetensors file by name (the test passes PyTorch's initial weights),
 * else they start as PyTorch initialises them (uniform within
 * 1/sqrt(fan_in)). The first epoch visits the training set in file order
 * (the test replays it in PyTorch), later ones in a seeded shuffle.
 * Prints each of the first --print-losses steps' loss, then the held-out
 * accuracy (batch norm in eval mode, with its running statistics).
 *
 * Usage: digits_cnn DATA [--init FILE] [--epochs N] [--batch B] [--lr LR]
 *                         [--print-losses K] [--threads T]
 * Build: make build/examples/digits_cnn */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "enkai_tensor.h"

static void fail(const char *what) {
    fprintf(stderr, "digits_cnn: %s failed: %s\n", what, enkai_tensor_last_error());
    exit(1);
}

/* The handles made during one step, freed together at its end. */
static int64_t scratch[64];
static int n_scratch;

static int64_t keep(int64_t h, const char *what) {
    if (!h) fail(what);
    if (n_scratch == (int)(sizeof scratch / sizeof scratch[0])) fail("scratch space");
    scratch[n_scratch++] = h;
    return h;
}

static void release_scratch(void) {
    for (int i = 0; i < n_scratch; i++) enkai_tensor_free(scratch[i]);
    n_scratch = 0;
}

/* One op with one result, kept in the step's scratch. */
static int64_t op(const char *name, const int64_t *in, size_t n, const char *kwargs) {
    int64_t out;
    if (enkai_op(name, in, n, kwargs, &out, 1) != 1) fail(name);
    return keep(out, name);
}

#define OP(name, kw, ...) op(name, (int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), kw)

enum { CONV1_W, CONV1_B, BN1_W, BN1_B, CONV2_W, CONV2_B, BN2_W, BN2_B, FC_W, FC_B, N_TRAINED, BN1_RM = N_TRAINED, BN1_RV, BN2_RM, BN2_RV, N_PARAMS };
static const char *NAMES[N_PARAMS] = {"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "conv2.weight", "conv2.bias",
                                      "bn2.weight", "bn2.bias", "fc.weight", "fc.bias", "bn1.running_mean",
                                      "bn1.running_var", "bn2.running_mean", "bn2.running_var"};
static const char *SHAPES[N_PARAMS] = {"[16,1,3,3]", "[16]", "[16]", "[16]", "[32,16,3,3]", "[32]", "[32]", "[32]",
                                       "[10,128]", "[10]", "[16]", "[16]", "[32]", "[32]"};
static const int FAN_IN[N_PARAMS] = {9, 9, 0, 0, 144, 144, 0, 0, 128, 128, 0, 0, 0, 0};

typedef struct {
    uint32_t n_train, n_test;
    float *x_train, *x_test; /* [n, 1, 8, 8], pixels / 16 */
    int64_t *y_train, *y_test;
} Digits;

static void read_exact(FILE *f, void *p, size_t n, const char *path) {
    if (fread(p, 1, n, f) != n) {
        fprintf(stderr, "digits_cnn: %s is truncated\n", path);
        exit(1);
    }
}

static Digits load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "digits_cnn: cannot open %s (make it with scripts/export_digits.py)\n", path);
        exit(1);
    }
    char magic[8];
    Digits d;
    read_exact(f, magic, 8, path);
    if (memcmp(magic, "EKDIGIT1", 8) != 0) {
        fprintf(stderr, "digits_cnn: %s is not a digits file\n", path);
        exit(1);
    }
    read_exact(f, &d.n_train, 4, path);
    read_exact(f, &d.n_test, 4, path);
    if (d.n_train == 0 || d.n_train > 100000 || d.n_test > 100000) {
        fprintf(stderr, "digits_cnn: %s: implausible sizes\n", path);
        exit(1);
    }
    d.x_train = malloc(sizeof(float) * 64 * d.n_train);
    d.x_test = malloc(sizeof(float) * 64 * (d.n_test + 1));
    d.y_train = malloc(sizeof(int64_t) * d.n_train);
    d.y_test = malloc(sizeof(int64_t) * (d.n_test + 1));
    if (!d.x_train || !d.x_test || !d.y_train || !d.y_test) fail("malloc");
    read_exact(f, d.x_train, sizeof(float) * 64 * d.n_train, path);
    read_exact(f, d.y_train, sizeof(int64_t) * d.n_train, path);
    read_exact(f, d.x_test, sizeof(float) * 64 * d.n_test, path);
    read_exact(f, d.y_test, sizeof(int64_t) * d.n_test, path);
    fclose(f);
    return d;
}

/* The parameters as PyTorch initialises them: conv and linear weights and
 * biases uniform in ±1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5)),
 * batch norm's weight 1, bias 0, running mean 0 and variance 1. */
static void init_params(int64_t *p) {
    for (int i = 0; i < N_PARAMS; i++) {
        char kw[96];
        snprintf(kw, sizeof kw, "{\"size\": %s}", SHAPES[i]);
        if (FAN_IN[i]) {
            double bound = 1.0 / sqrt((double)FAN_IN[i]);
            int64_t r = op("rand", NULL, 0, kw); /* uniform in [0, 1) */
            snprintf(kw, sizeof kw, "{\"other\": %.17g}", 2.0 * bound);
            int64_t s = op("mul", (int64_t[]){r}, 1, kw);
            snprintf(kw, sizeof kw, "{\"other\": %.17g}", bound);
            if (enkai_op("sub", (int64_t[]){s}, 1, kw, &p[i], 1) != 1) fail("sub");
        } else {
            int one = i == BN1_W || i == BN2_W || i == BN1_RV || i == BN2_RV;
            if (enkai_op(one ? "ones" : "zeros", NULL, 0, kw, &p[i], 1) != 1) fail("ones/zeros");
        }
    }
    release_scratch();
}

/* The parameters from a safetensors file, by name, copied (the file's
 * tensors are read-only views; training writes into these). */
static void load_params(int64_t *p, const char *path, int64_t dev) {
    int64_t st = enkai_safetensors_open(path);
    if (!st) fail("safetensors_open");
    for (int i = 0; i < N_PARAMS; i++) {
        int64_t t = enkai_safetensors_get(st, NAMES[i], dev);
        if (!t) fail(NAMES[i]);
        if (enkai_op("clone", (int64_t[]){t}, 1, NULL, &p[i], 1) != 1) fail("clone");
        enkai_tensor_free(t);
    }
    if (enkai_safetensors_free(st)) fail("safetensors_free");
}

/* conv -> batch_norm -> relu -> max_pool, for block `b` (0 or 1). */
static int64_t block(int64_t x, const int64_t *p, int b, int training) {
    int w = b ? CONV2_W : CONV1_W, g = b ? BN2_W : BN1_W, rm = b ? BN2_RM : BN1_RM;
    int64_t h = OP("conv2d", "{\"padding\": [1, 1]}", x, p[w], p[w + 1]);
    h = OP("batch_norm", training ? "{\"training\": true, \"momentum\": 0.1, \"eps\": 1e-5}" : "{\"training\": false}", h,
           p[rm], p[rm + 1], p[g], p[g + 1]);
    h = OP("relu", NULL, h);
    return OP("max_pool2d", "{\"kernel_size\": [2, 2]}", h);
}

static int64_t logits_of(int64_t x, const int64_t *p, int training, int64_t batch) {
    int64_t h = block(block(x, p, 0, training), p, 1, training);
    char shape[64];
    snprintf(shape, sizeof shape, "{\"shape\": [%lld, 128]}", (long long)batch);
    h = OP("reshape", shape, h);
    return OP("linear", NULL, h, p[FC_W], p[FC_B]);
}

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: digits_cnn DATA [--init FILE] [--epochs N] [--batch B] [--lr LR] [--print-losses K] [--threads T]\n");
        return 2;
    }
    const char *init = NULL;
    int epochs = 15, batch = 32, print_losses = 0, threads = 0;
    double lr = 3e-3;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--init")) init = argv[i + 1];
        else if (!strcmp(argv[i], "--epochs")) epochs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lr")) lr = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--print-losses")) print_losses = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "digits_cnn: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (batch < 1 || epochs < 0) {
        fprintf(stderr, "digits_cnn: bad --batch or --epochs\n");
        return 2;
    }
    if (threads > 0 && enkai_set_num_threads(threads)) fail("set_num_threads");
    Digits d = load(argv[1]);
    int64_t dev = enkai_tensor_device("cpu");
    if (!dev || enkai_tensor_manual_seed(0)) fail("device");
    int64_t p[N_PARAMS];
    if (init) load_params(p, init, dev);
    else init_params(p);
    char list[512] = "[";
    for (int i = 0; i < N_TRAINED; i++) {
        if (!enkai_tensor_require_grad(p[i])) fail("require_grad");
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", i ? "," : "", (long long)p[i]);
    }
    strcat(list, "]");
    int64_t opt = enkai_opt_adamw_create(list, lr, 0.9, 0.999, 1e-8, 0.01);
    if (!opt) fail("adamw_create");

    uint32_t *order = malloc(sizeof(uint32_t) * d.n_train);
    float *xb = malloc(sizeof(float) * 64 * (size_t)batch);
    int64_t *yb = malloc(sizeof(int64_t) * (size_t)batch);
    if (!order || !xb || !yb) fail("malloc");
    int step = 0;
    double t0 = now();
    for (int e = 0; e < epochs; e++) {
        for (uint32_t i = 0; i < d.n_train; i++) order[i] = i;
        for (uint32_t i = d.n_train - 1; e > 0 && i > 0; i--) { /* Fisher-Yates, seeded by the epoch */
            uint32_t j = (uint32_t)(mix(((uint64_t)e << 32) | i) % (i + 1));
            uint32_t t = order[i];
            order[i] = order[j], order[j] = t;
        }
        double sum = 0;
        int n_batches = 0;
        for (uint32_t at = 0; at + (uint32_t)batch <= d.n_train; at += (uint32_t)batch) {
            for (int b = 0; b < batch; b++) {
                memcpy(xb + 64 * b, d.x_train + 64 * (size_t)order[at + b], sizeof(float) * 64);
                yb[b] = d.y_train[order[at + b]];
            }
            char shape[64];
            snprintf(shape, sizeof shape, "[%d,1,8,8]", batch);
            int64_t x = keep(enkai_tensor_from_data(xb, sizeof(float) * 64 * (size_t)batch, shape, "fp32", dev), "from_data");
            snprintf(shape, sizeof shape, "[%d]", batch);
            int64_t y = keep(enkai_tensor_from_data(yb, sizeof(int64_t) * (size_t)batch, shape, "int64", dev), "from_data");
            if (enkai_tensor_zero_grad_multi(list)) fail("zero_grad");
            int64_t loss = OP("cross_entropy", NULL, logits_of(x, p, 1, batch), y);
            if (enkai_tensor_backward(loss)) fail("backward");
            if (enkai_opt_adamw_step(opt)) fail("adamw_step");
            double l = enkai_tensor_item(loss);
            if (step < print_losses) printf("step %d loss %.9g\n", step, l);
            sum += l;
            n_batches++;
            step++;
            release_scratch();
        }
        printf("epoch %2d  mean loss %.4f\n", e, n_batches ? sum / n_batches : 0.0);
    }
    double train_s = now() - t0;

    /* Held out: eval mode (running statistics), no graph. */
    if (enkai_set_grad_enabled(0) < 0) fail("set_grad_enabled");
    char shape[64];
    snprintf(shape, sizeof shape, "[%u,1,8,8]", d.n_test);
    int64_t x = keep(enkai_tensor_from_data(d.x_test, sizeof(float) * 64 * d.n_test, shape, "fp32", dev), "from_data");
    snprintf(shape, sizeof shape, "[%u]", d.n_test);
    int64_t y = keep(enkai_tensor_from_data(d.y_test, sizeof(int64_t) * d.n_test, shape, "int64", dev), "from_data");
    int64_t pred = OP("argmax", "{\"dim\": 1}", logits_of(x, p, 0, d.n_test));
    int64_t acc = OP("mean", "{\"dtype\": \"float32\"}", OP("eq", NULL, pred, y));
    printf("trained %d steps in %.2f s (%.0f images/s)\n", step, train_s, step * (double)batch / (train_s > 0 ? train_s : 1));
    printf("test accuracy %.4f (%u held-out images)\n", enkai_tensor_item(acc), d.n_test);
    release_scratch();

    enkai_tensor_opt_free(opt);
    for (int i = 0; i < N_PARAMS; i++) enkai_tensor_free(p[i]);
    enkai_tensor_device_free(dev);
    free(order), free(xb), free(yb);
    free(d.x_train), free(d.x_test), free(d.y_train), free(d.y_test);
    long long live = (long long)enkai_tensor_live_tensors();
    printf("live tensors %lld\n", live);
    return live == 0 ? 0 : 1;
}
