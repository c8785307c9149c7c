/* train_tinylm: trains a small character-level GPT on a built-in text
 * through the C ABI, with autocast (bf16 on CPU), a GradScaler, gradient
 * clipping and AdamW, then samples a few characters greedily.
 *
 * Data-parallel under torchrun (RANK and WORLD_SIZE set):
 *   torchrun --no-python --standalone --nproc-per-node 2 build/examples/train_tinylm
 * every rank starts from rank 0's weights (broadcast), trains on its own rows
 * of each step's batch, and averages gradients each step as DDP does; rank 0
 * prints, and every rank prints a checksum of its parameters at the end.
 * TINYLM_STEPS overrides the number of steps (300).
 *
 * Elastic training: with TINYLM_CKPT_DIR set, every rank saves a ranked
 * checkpoint (params, AdamW, GradScaler, the step) every TINYLM_CKPT_EVERY
 * steps (25), and a (re)started run resumes from the latest one. Under
 *   torchrun --no-python --standalone --nproc-per-node 2 --max-restarts 1 ...
 * a killed rank costs the steps since the last checkpoint: the data of a step
 * is a function of the step, so the resumed run ends with the same parameters,
 * bit for bit. TINYLM_KILL_AT=S makes rank TINYLM_KILL_RANK (1) SIGKILL itself
 * at step S of the first attempt, to try it.
 * Build: cc train_tinylm.c -Iinclude -Ltarget/release -lenkai_tensor -Wl,-rpath,$PWD/target/release */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
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

enum { SEQ = 32, BATCH = 16, D = 64, LAYERS = 2, HEADS = 4 };

static void fail(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, enkai_tensor_last_error());
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* splitmix64: the text offset of a batch row is a function of (step, row) alone,
 * so ranks draw disjoint rows and a run can be replayed from any step. */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

/* FNV-1a over the bytes of every fp32 parameter of a JSON handle list. */
static uint64_t checksum(const char *list) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = list; *p;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        char *end;
        int64_t t = strtoll(p, &end, 10);
        p = end;
        size_t n = (size_t)enkai_tensor_numel(t) * sizeof(float);
        unsigned char *buf = malloc(n ? n : 1);
        if (!buf || enkai_tensor_copy_to(t, buf, n)) fail("checksum");
        for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
        free(buf);
    }
    return h;
}

/* Frees every handle of a JSON list such as "[12,0,15]". */
static void free_list(char *list) {
    for (char *p = list; *p;) {
        if (*p >= '0' && *p <= '9') {
            int64_t h = strtoll(p, &p, 10);
            if (h) enkai_tensor_free(h);
        } else {
            p++;
        }
    }
    enkai_tensor_string_free(list);
}

int main(void) {
    /* the vocabulary: the distinct characters of the text */
    char vocab[128] = {0};
    int v = 0, index[256];
    memset(index, -1, sizeof index);
    for (const char *c = TEXT; *c; c++)
        if (index[(unsigned char)*c] < 0) index[(unsigned char)*c] = v, vocab[v++] = *c;
    size_t n = strlen(TEXT);
    char spec[256];
    snprintf(spec, sizeof spec, "{\"vocab_size\":%d,\"seq_len\":%d,\"d_model\":%d,\"n_layers\":%d,\"n_heads\":%d}",
             v, SEQ, D, LAYERS, HEADS);

    int world = env_int("WORLD_SIZE", 1), rank = env_int("RANK", 0), steps = env_int("TINYLM_STEPS", 300);
    int64_t dev;
    if (world > 1) { /* this rank's device (cuda:LOCAL_RANK if usable, else cpu), then the group */
        if (enkai_dist_config(world, rank, -1, 42) || !(dev = enkai_dist_device()) || enkai_dist_init(world, rank))
            fail("dist init");
    } else {
        dev = enkai_tensor_device("cpu");
    }
    char *params, *meta;
    size_t len, meta_len;
    int64_t opt = 0, scaler = 0;
    int first = 1;
    const char *ckpt = getenv("TINYLM_CKPT_DIR");
    int every = env_int("TINYLM_CKPT_EVERY", 25);
    if (ckpt && enkai_checkpoint_load_ranked(ckpt, rank, &params, &len, &opt, &meta, &meta_len) == 0) {
        /* resume: params, AdamW and GradScaler state, and the step they were saved at */
        const char *at = strstr(meta, "\"step\":");
        first = (at ? atoi(at + 7) : 0) + 1;
        enkai_tensor_string_free(meta);
        if (!(scaler = enkai_checkpoint_load_ranked_scaler(ckpt, rank))) fail("load scaler");
        if (rank == 0) printf("resumed from %s at step %d\n", ckpt, first - 1);
    } else {
        if (ckpt && enkai_tensor_last_error_code() != E_CKPT_MISSING) fail("load checkpoint");
        if (enkai_tensor_lm_init(spec, dev, 42, &params, &len)) fail("lm_init");
        if (world > 1 && enkai_dist_broadcast(params, 0)) fail("broadcast"); /* everyone starts from rank 0's weights */
        opt = enkai_opt_adamw_create(params, 3e-3, 0.9, 0.95, 1e-8, 0.01);
        scaler = enkai_amp_scaler_create(65536.0, 2.0, 0.5, 2000);
    }
    if (!opt || !scaler) fail("create");
    const char *attempt = getenv("TORCHELASTIC_RESTART_COUNT");
    int kill_at = (!attempt || atoi(attempt) == 0) ? env_int("TINYLM_KILL_AT", 0) : 0;
    if (rank == 0)
        printf("TinyLM: vocab %d, d_model %d, %d layers, %d heads; %d rank(s) x batch %d x seq %d\n", v, D, LAYERS,
               HEADS, world, BATCH, SEQ);

    uint32_t in[BATCH * SEQ], tgt[BATCH * SEQ];
    double t0 = now(), window = now();
    for (int step = first; step <= steps; step++) {
        if (step == kill_at && rank == env_int("TINYLM_KILL_RANK", 1)) raise(SIGKILL);
        for (int b = 0; b < BATCH; b++) {
            size_t off = (size_t)(mix(((uint64_t)step << 32) | (uint64_t)(rank * BATCH + b)) % (n - SEQ - 1));
            for (int s = 0; s < SEQ; s++) {
                in[b * SEQ + s] = (uint32_t)index[(unsigned char)TEXT[off + s]];
                tgt[b * SEQ + s] = (uint32_t)index[(unsigned char)TEXT[off + s + 1]];
            }
        }
        if (enkai_tensor_zero_grad_multi(params)) fail("zero_grad");
        enkai_autocast_enter();
        int64_t loss = enkai_tensor_forward_lm(params, spec, in, BATCH * SEQ, tgt, BATCH * SEQ, BATCH, SEQ, 1);
        enkai_autocast_exit();
        if (!loss) fail("forward");
        double l = enkai_tensor_item(loss);
        int64_t scaled = enkai_amp_scale_loss(loss, scaler);
        if (!scaled || enkai_tensor_backward(scaled)) fail("backward");
        /* DDP's gradient mean; the grads are then identical on every rank, so
           every rank finds the same inf and skips the same steps */
        if (world > 1 && enkai_dist_allreduce_grads(params, 0)) fail("allreduce_grads");
        char *grads;
        if (enkai_tensor_grad_multi(params, &grads, &len)) fail("grad_multi");
        int found_inf = 0;
        double norm = 0;
        if (enkai_amp_unscale_grads(grads, scaler, &found_inf)) fail("unscale");
        if (!found_inf) {
            if (enkai_tensor_clip_grad_norm_multi(grads, 1.0, 2.0, &norm)) fail("clip");
            if (enkai_opt_adamw_step(opt)) fail("step");
        }
        if (enkai_amp_scaler_update(scaler, found_inf)) fail("update");
        free_list(grads);
        enkai_tensor_free(loss);
        enkai_tensor_free(scaled);
        if (ckpt && step % every == 0) {
            char m[64];
            snprintf(m, sizeof m, "{\"step\":%d}", step);
            if (enkai_checkpoint_save_ranked_amp(ckpt, rank, world, params, opt, scaler, m)) fail("checkpoint");
        }
        if (step % 25 == 0 && rank == 0) {
            double dt = now() - window;
            window = now();
            printf("step %4d  loss %.4f  grad-norm %.3f  %8.0f tokens/s%s\n", step, l, norm,
                   25.0 * world * BATCH * SEQ / dt, found_inf ? "  (skipped: inf)" : "");
        }
    }
    if (rank == 0) printf("trained %d steps in %.1f s\n", steps, now() - t0);
    if (world > 1) {
        fflush(stdout);
        printf("rank %d: parameter checksum %016llx\n", rank, (unsigned long long)checksum(params));
    }

    /* greedy sampling from a prompt */
    char out[SEQ + 64] = "";
    const char *prompt = "It is a truth ";
    strcpy(out, prompt);
    size_t have = strlen(out);
    while (rank == 0 && have < sizeof out - 1 && have < strlen(prompt) + 48) {
        size_t ctx = have < SEQ ? have : SEQ;
        uint32_t ids[SEQ];
        for (size_t i = 0; i < ctx; i++) ids[i] = (uint32_t)index[(unsigned char)out[have - ctx + i]];
        int64_t logits = enkai_tensor_lm_logits(params, spec, ids, ctx, 1, (int64_t)ctx);
        if (!logits) fail("logits");
        int64_t last = enkai_tensor_slice(logits, 1, (int64_t)ctx - 1, (int64_t)ctx, 1);
        float row[128];
        if (!last || enkai_tensor_copy_to(last, row, sizeof(float) * (size_t)v)) fail("read logits");
        int best = 0;
        for (int i = 1; i < v; i++)
            if (row[i] > row[best]) best = i;
        out[have++] = vocab[best];
        out[have] = 0;
        enkai_tensor_free(last);
        enkai_tensor_free(logits);
    }
    if (rank == 0) printf("sample: \"%s\"\n", out);
    if (enkai_dist_shutdown()) fail("shutdown");

    enkai_tensor_opt_free(opt);
    enkai_amp_scaler_free(scaler);
    free_list(params);
    enkai_tensor_device_free(dev);
    if (rank == 0)
        printf("live: tensors=%lld devices=%lld opts=%lld scalers=%lld\n", (long long)enkai_tensor_live_tensors(),
           (long long)enkai_tensor_live_devices(), (long long)enkai_tensor_live_opts(),
           (long long)enkai_tensor_live_scalers());
    return 0;
}
