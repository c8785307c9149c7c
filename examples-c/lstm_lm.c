/* lstm_lm: a character-level LSTM language model trained from C on the
 * demo's text (train_tinylm's), every op by its PyTorch name through
 * `enkai_op`:
 *
 *   embedding (V -> 32) -> lstm (2 layers, hidden 64, batch_first) -> linear (64 -> V)
 *
 * trained with AdamW on cross_entropy over random windows. The weights are
 * named and laid out as this PyTorch module's state_dict:
 *
 *   class LM(nn.Module):
 *       embed = nn.Embedding(V, 32); lstm = nn.LSTM(32, 64, 2, batch_first=True); head = nn.Linear(64, V)
 *
 * so `--save FILE` writes a safetensors file that `load_state_dict` takes
 * unchanged. `--print-logits` prints the logits of the last position of a
 * fixed prompt (the test compares them with that module's), then a greedy
 * sample. Usage: lstm_lm [--steps N] [--save FILE] [--print-logits] [--threads T]
 * Build: make build/examples/lstm_lm */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "enkai_tensor.h"

static const char *TEXT =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. ";

enum { SEQ = 32, BATCH = 16, E = 32, H = 64, LAYERS = 2 };
#define PROMPT "It is a truth "

static void fail(const char *what) {
    fprintf(stderr, "lstm_lm: %s failed: %s\n", what, enkai_tensor_last_error());
    exit(1);
}

/* The handles made during one step, freed together at its end. */
static int64_t scratch[64];
static int n_scratch;

static int64_t keep(int64_t h, const char *what) {
    if (!h) fail(what);
    if (n_scratch == (int)(sizeof scratch / sizeof scratch[0])) fail("scratch space");
    return scratch[n_scratch++] = h;
}

static void release_scratch(void) {
    for (int i = 0; i < n_scratch; i++) enkai_tensor_free(scratch[i]);
    n_scratch = 0;
}

/* An op's results (up to 3), kept in the step's scratch; returns the first. */
static int64_t opn(const char *name, const int64_t *in, size_t n, const char *kwargs, int64_t *outs, size_t cap) {
    int64_t local[3];
    int64_t *o = outs ? outs : local;
    int64_t got = enkai_op(name, in, n, kwargs, o, outs ? cap : 3);
    if (got < 1) fail(name);
    for (int64_t i = 0; i < got; i++) keep(o[i], name);
    return o[0];
}

#define OP(name, kw, ...) opn(name, (int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), kw, NULL, 0)

/* Parameters: embed.weight, lstm.{weight_ih,weight_hh,bias_ih,bias_hh}_l{0,1}, head.weight, head.bias. */
enum { EMBED, LSTM0, HEAD_W = LSTM0 + 4 * LAYERS, HEAD_B, N_PARAMS };
static char names[N_PARAMS][32];
static int64_t p[N_PARAMS];

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform(-bound, bound) of `shape`, as PyTorch initialises nn.LSTM (1/sqrt(H)) and nn.Linear (1/sqrt(fan_in)). */
static int64_t uniform(const char *shape, double bound) {
    char kw[96];
    snprintf(kw, sizeof kw, "{\"size\": %s}", shape);
    int64_t r = opn("rand", NULL, 0, kw, NULL, 0);
    snprintf(kw, sizeof kw, "{\"other\": %.17g}", 2.0 * bound);
    int64_t s = OP("mul", kw, r);
    snprintf(kw, sizeof kw, "{\"other\": %.17g}", bound);
    int64_t out;
    if (enkai_op("sub", (int64_t[]){s}, 1, kw, &out, 1) != 1) fail("sub");
    return out;
}

static void init(int v) {
    char shape[64], kw[64];
    snprintf(names[EMBED], sizeof names[0], "embed.weight");
    snprintf(kw, sizeof kw, "{\"size\": [%d, %d]}", v, E);
    int64_t r = opn("rand", NULL, 0, kw, NULL, 0); /* N(0, 1) as nn.Embedding: randn_like of a [V, E] tensor */
    if (enkai_op("randn_like", (int64_t[]){r}, 1, NULL, &p[EMBED], 1) != 1) fail("randn_like");
    const char *kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 4; k++) {
            int i = LSTM0 + 4 * l + k;
            snprintf(names[i], sizeof names[0], "lstm.%s_l%d", kinds[k], l);
            if (k == 0) snprintf(shape, sizeof shape, "[%d, %d]", 4 * H, l ? H : E);
            else if (k == 1) snprintf(shape, sizeof shape, "[%d, %d]", 4 * H, H);
            else snprintf(shape, sizeof shape, "[%d]", 4 * H);
            p[i] = uniform(shape, 1.0 / sqrt((double)H));
        }
    snprintf(names[HEAD_W], sizeof names[0], "head.weight");
    snprintf(names[HEAD_B], sizeof names[0], "head.bias");
    snprintf(shape, sizeof shape, "[%d, %d]", v, H);
    p[HEAD_W] = uniform(shape, 1.0 / sqrt((double)H));
    snprintf(shape, sizeof shape, "[%d]", v);
    p[HEAD_B] = uniform(shape, 1.0 / sqrt((double)H));
    release_scratch();
}

/* Logits [B, T, V] of ids [B, T]. */
static int64_t forward(int64_t ids, int64_t b) {
    int64_t x = OP("embedding", NULL, ids, p[EMBED]);
    char kw[64];
    snprintf(kw, sizeof kw, "{\"size\": [%d, %lld, %d]}", LAYERS, (long long)b, H);
    int64_t h0 = opn("zeros", NULL, 0, kw, NULL, 0), c0 = opn("zeros", NULL, 0, kw, NULL, 0);
    int64_t in[3 + 4 * LAYERS] = {x, h0, c0};
    for (int i = 0; i < 4 * LAYERS; i++) in[3 + i] = p[LSTM0 + i];
    int64_t outs[3];
    char lk[96];
    snprintf(lk, sizeof lk, "{\"num_layers\": %d, \"batch_first\": true}", LAYERS);
    int64_t y = opn("lstm", in, 3 + 4 * LAYERS, lk, outs, 3);
    return OP("linear", NULL, y, p[HEAD_W], p[HEAD_B]);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int steps = 300, print_logits = 0, threads = 0;
    const char *save = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--print-logits")) print_logits = 1;
        else {
            fprintf(stderr, "usage: lstm_lm [--steps N] [--save FILE] [--print-logits] [--threads T]\n");
            return 2;
        }
    }
    if (threads > 0 && enkai_set_num_threads(threads)) fail("set_num_threads");
    char vocab[128];
    int v = 0, index[256];
    memset(index, -1, sizeof index);
    for (const char *c = TEXT; *c; c++)
        if (index[(unsigned char)*c] < 0) index[(unsigned char)*c] = v, vocab[v++] = *c;
    size_t n = strlen(TEXT);
    int64_t dev = enkai_tensor_device("cpu");
    if (!dev || enkai_tensor_manual_seed(0)) fail("device");
    init(v);
    char list[512] = "[";
    for (int i = 0; i < N_PARAMS; i++) {
        if (!enkai_tensor_require_grad(p[i])) fail("require_grad");
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", i ? "," : "", (long long)p[i]);
    }
    strcat(list, "]");
    int64_t opt = enkai_opt_adamw_create(list, 1e-2, 0.9, 0.999, 1e-8, 0.0);
    if (!opt) fail("adamw_create");

    int64_t in[BATCH * SEQ], tgt[BATCH * SEQ];
    double t0 = now(), first = 0, last = 0;
    for (int step = 0; step < steps; step++) {
        for (int b = 0; b < BATCH; b++) {
            size_t off = (size_t)(mix(((uint64_t)step << 32) | (uint64_t)b) % (n - SEQ - 1));
            for (int s = 0; s < SEQ; s++) {
                in[b * SEQ + s] = index[(unsigned char)TEXT[off + s]];
                tgt[b * SEQ + s] = index[(unsigned char)TEXT[off + s + 1]];
            }
        }
        int64_t ids = keep(enkai_tensor_from_data(in, sizeof in, "[16,32]", "int64", dev), "from_data");
        int64_t y = keep(enkai_tensor_from_data(tgt, sizeof tgt, "[512]", "int64", dev), "from_data");
        if (enkai_tensor_zero_grad_multi(list)) fail("zero_grad");
        char kw[64];
        snprintf(kw, sizeof kw, "{\"shape\": [%d, %d]}", BATCH * SEQ, v);
        int64_t loss = OP("cross_entropy", NULL, OP("reshape", kw, forward(ids, BATCH)), y);
        if (enkai_tensor_backward(loss)) fail("backward");
        if (enkai_opt_adamw_step(opt)) fail("adamw_step");
        last = enkai_tensor_item(loss);
        if (step == 0) first = last;
        if (step % 50 == 0 || step == steps - 1) printf("step %4d  loss %.4f\n", step, last);
        release_scratch();
    }
    double dt = now() - t0;
    printf("trained %d steps in %.2f s (%.0f tokens/s); loss %.4f -> %.4f\n", steps, dt,
           steps * (double)BATCH * SEQ / (dt > 0 ? dt : 1), first, last);
    if (save) {
        char nl[1024] = "[";
        for (int i = 0; i < N_PARAMS; i++) snprintf(nl + strlen(nl), sizeof nl - strlen(nl), "%s\"%s\"", i ? "," : "", names[i]);
        strcat(nl, "]");
        if (enkai_state_dict_save(save, nl, list, "{\"format\": \"pt\"}")) fail("state_dict_save");
        printf("saved %s\n", save);
    }

    /* The prompt's last logits, then a greedy sample (no graph). */
    if (enkai_set_grad_enabled(0) < 0) fail("set_grad_enabled");
    char out[128] = PROMPT;
    size_t have = strlen(out);
    for (int k = 0; k < 40; k++) {
        int64_t ids_h[128];
        for (size_t i = 0; i < have; i++) ids_h[i] = index[(unsigned char)out[i]];
        char shape[32];
        snprintf(shape, sizeof shape, "[1,%zu]", have);
        int64_t ids = keep(enkai_tensor_from_data(ids_h, sizeof(int64_t) * have, shape, "int64", dev), "from_data");
        int64_t logits = forward(ids, 1);
        int64_t lastrow = keep(enkai_tensor_slice(logits, 1, (int64_t)have - 1, (int64_t)have, 1), "slice");
        float row[128];
        if (enkai_tensor_copy_to(lastrow, row, sizeof(float) * (size_t)v)) fail("copy_to");
        if (k == 0 && print_logits) {
            printf("logits:");
            for (int i = 0; i < v; i++) printf(" %.9g", row[i]);
            printf("\nvocab: ");
            for (int i = 0; i < v; i++) printf("%02x", (unsigned char)vocab[i]);
            printf("\n");
        }
        int best = 0;
        for (int i = 1; i < v; i++)
            if (row[i] > row[best]) best = i;
        out[have++] = vocab[best];
        out[have] = 0;
        release_scratch();
    }
    printf("sample: \"%s\"\n", out);
    enkai_tensor_opt_free(opt);
    for (int i = 0; i < N_PARAMS; i++) enkai_tensor_free(p[i]);
    enkai_tensor_device_free(dev);
    long long live = (long long)enkai_tensor_live_tensors();
    printf("live tensors %lld\n", live);
    return live == 0 ? 0 : 1;
}
