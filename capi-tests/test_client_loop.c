/* The Enkai runtime's view of the library: dlopen it, resolve every symbol
 * its training backend uses by name with the exact C signatures it declares
 * (the header's, which must not change),
 * and run its step sequence for 50 steps on a tiny corpus. Loss must fall
 * and every live counter must return to its baseline after teardown. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(c)                                                                              \
    do {                                                                                      \
        if (c) passed++;                                                                      \
        else {                                                                                \
            failed++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: %s\n", __FILE__, __LINE__, #c, last_error()); \
        }                                                                                     \
    } while (0)

/* The [client] symbols, with the signatures the runtime declares. */
static const char *(*last_error)(void);
static int64_t (*device)(const char *);
static int (*device_free)(int64_t);
static int (*tensor_free)(int64_t);
static double (*item)(int64_t);
static int (*backward)(int64_t);
static int (*grad_multi)(const char *, char **, size_t *);
static int (*zero_grad_multi)(const char *);
static int (*check_finite_multi)(const char *);
static int (*scale_grads_multi)(const char *, double);
static int (*clip_grad_norm_multi)(const char *, double, double, double *);
static int64_t (*opt_adamw_create)(const char *, double, double, double, double, double);
static int (*opt_adamw_step)(int64_t);
static int (*opt_free)(int64_t);
static int64_t (*adamw_step_multi)(const char *, const char *, int64_t, double, double, double, double, double);
static int (*tinylm_init)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, char **, size_t *);
static int64_t (*forward_tinylm)(const char *, const uint32_t *, size_t, const uint32_t *, size_t, int64_t, int64_t, int64_t);
static int (*lm_init)(const char *, int64_t, int64_t, char **, size_t *);
static int64_t (*forward_lm)(const char *, const char *, const uint32_t *, size_t, const uint32_t *, size_t, int64_t, int64_t, int);
static int (*ckpt_save)(const char *, const char *, int64_t, const char *);
static int (*ckpt_load)(const char *, char **, size_t *, int64_t *, char **, size_t *);
static int (*ckpt_save_ranked)(const char *, int64_t, int64_t, const char *, int64_t, const char *);
static int (*ckpt_load_ranked)(const char *, int64_t, char **, size_t *, int64_t *, char **, size_t *);
static int (*dist_init)(int32_t, int32_t);
static int (*dist_allreduce_sum_multi)(const char *);
static int (*dist_shutdown)(void);
/* Used by the runtime's loop as well (signatures the runtime does not pin). */
static int (*autocast_enter)(void);
static int (*autocast_exit)(void);
static int64_t (*scale_loss)(int64_t, int64_t);
static int (*unscale_grads)(const char *, int64_t, int *);
static int (*scaler_update)(int64_t, int);
static int64_t (*scaler_create)(double, double, double, int64_t);
static int (*scaler_free)(int64_t);
static int64_t (*live_tensors)(void), (*live_devices)(void), (*live_opts)(void), (*live_scalers)(void);
static void (*string_free)(char *);

static void *lib;
static int missing;

static void *resolve(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "missing symbol %s\n", name);
        missing++;
    }
    return p;
}

#define RESOLVE(var, name) *(void **)(&var) = resolve(name)

static const char *CORPUS =
    "the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. "
    "a stitch in time saves nine. a stitch in time saves nine. ";

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "target/release/libenkai_tensor.so";
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    RESOLVE(last_error, "enkai_tensor_last_error");
    RESOLVE(device, "enkai_tensor_device");
    RESOLVE(device_free, "enkai_tensor_device_free");
    RESOLVE(tensor_free, "enkai_tensor_free");
    RESOLVE(item, "enkai_tensor_item");
    RESOLVE(backward, "enkai_tensor_backward");
    RESOLVE(grad_multi, "enkai_tensor_grad_multi");
    RESOLVE(zero_grad_multi, "enkai_tensor_zero_grad_multi");
    RESOLVE(check_finite_multi, "enkai_tensor_check_finite_multi");
    RESOLVE(scale_grads_multi, "enkai_tensor_scale_grads_multi");
    RESOLVE(clip_grad_norm_multi, "enkai_tensor_clip_grad_norm_multi");
    RESOLVE(opt_adamw_create, "enkai_opt_adamw_create");
    RESOLVE(opt_adamw_step, "enkai_opt_adamw_step");
    RESOLVE(opt_free, "enkai_tensor_opt_free");
    RESOLVE(adamw_step_multi, "enkai_tensor_adamw_step_multi");
    RESOLVE(tinylm_init, "enkai_tensor_tinylm_init");
    RESOLVE(forward_tinylm, "enkai_tensor_forward_tinylm");
    RESOLVE(lm_init, "enkai_tensor_lm_init");
    RESOLVE(forward_lm, "enkai_tensor_forward_lm");
    RESOLVE(ckpt_save, "enkai_checkpoint_save");
    RESOLVE(ckpt_load, "enkai_checkpoint_load");
    RESOLVE(ckpt_save_ranked, "enkai_checkpoint_save_ranked");
    RESOLVE(ckpt_load_ranked, "enkai_checkpoint_load_ranked");
    RESOLVE(dist_init, "enkai_dist_init");
    RESOLVE(dist_allreduce_sum_multi, "enkai_dist_allreduce_sum_multi");
    RESOLVE(dist_shutdown, "enkai_dist_shutdown");
    RESOLVE(autocast_enter, "enkai_autocast_enter");
    RESOLVE(autocast_exit, "enkai_autocast_exit");
    RESOLVE(scale_loss, "enkai_amp_scale_loss");
    RESOLVE(unscale_grads, "enkai_amp_unscale_grads");
    RESOLVE(scaler_update, "enkai_amp_scaler_update");
    RESOLVE(scaler_create, "enkai_amp_scaler_create");
    RESOLVE(scaler_free, "enkai_amp_scaler_free");
    RESOLVE(live_tensors, "enkai_tensor_live_tensors");
    RESOLVE(live_devices, "enkai_tensor_live_devices");
    RESOLVE(live_opts, "enkai_tensor_live_opts");
    RESOLVE(live_scalers, "enkai_tensor_live_scalers");
    RESOLVE(string_free, "enkai_tensor_string_free");
    if (missing) return 1;

    int64_t t0 = live_tensors(), d0 = live_devices(), o0 = live_opts(), s0 = live_scalers();
    enum { V = 32, S = 16, B = 4, D = 32, L = 2, H = 4, STEPS = 50 };
    int64_t dev = device("cpu");
    CHECK(dev > 0);
    char *params = NULL;
    size_t params_len = 0;
    CHECK(tinylm_init(V, S, D, L, H, dev, 1234, &params, &params_len) == 0);
    int64_t scaler = scaler_create(65536.0, 2.0, 0.5, 2000);
    CHECK(scaler > 0);
    CHECK(dist_init(1, 0) == 0); /* a one-rank world, as the runtime runs single-process */

    size_t corpus_len = strlen(CORPUS);
    uint32_t in[B * S], tgt[B * S];
    int64_t state = 0;
    double first = 0, last = 0;
    int skipped = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int b = 0; b < B; b++) {
            size_t off = (size_t)((step * 7 + b * 29) % (int)(corpus_len - S - 1));
            for (int s = 0; s < S; s++) {
                in[b * S + s] = (uint32_t)CORPUS[off + s] % V;
                tgt[b * S + s] = (uint32_t)CORPUS[off + s + 1] % V;
            }
        }
        CHECK(zero_grad_multi(params) == 0);
        CHECK(autocast_enter() == 0);
        int64_t loss = forward_tinylm(params, in, B * S, tgt, B * S, B, S, H);
        CHECK(autocast_exit() == 0);
        CHECK(loss > 0);
        double l = item(loss);
        CHECK(isfinite(l));
        if (step == 0) first = l;
        last = l;
        int64_t scaled = scale_loss(loss, scaler);
        CHECK(backward(scaled) == 0);
        char *grads = NULL;
        size_t grads_len = 0;
        CHECK(grad_multi(params, &grads, &grads_len) == 0);
        int found_inf = -1;
        CHECK(unscale_grads(grads, scaler, &found_inf) == 0 && (found_inf == 0 || found_inf == 1));
        CHECK(scaler_update(scaler, found_inf) == 0);
        double total = -1;
        CHECK(dist_allreduce_sum_multi(grads) == 0);
        CHECK(clip_grad_norm_multi(grads, 1.0, 2.0, &total) == 0 && total >= 0);
        if (check_finite_multi(grads) == 0) {
            int64_t st = adamw_step_multi(params, grads, state, 3e-3, 0.9, 0.95, 1e-8, 0.01);
            CHECK(st > 0 && (state == 0 || st == state));
            state = st;
        } else {
            skipped++;
        }
        /* free grads, loss, scaled loss */
        const char *p = grads;
        while (*p) {
            if (*p >= '0' && *p <= '9') {
                int64_t h = strtoll(p, (char **)&p, 10);
                if (h) CHECK(tensor_free(h) == 0);
            } else {
                p++;
            }
        }
        string_free(grads);
        CHECK(tensor_free(loss) == 0);
        CHECK(tensor_free(scaled) == 0);
    }
    printf("client loop: loss %.4f -> %.4f over %d steps (%d skipped)\n", first, last, STEPS, skipped);
    CHECK(last < first - 0.5);

    /* checkpoint and resume: the loaded params give the same loss */
    char dir[] = "/tmp/enkai-client-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *meta = "{\"step\": 50}";
    CHECK(ckpt_save(dir, params, state, meta) == 0);
    char *loaded = NULL, *meta_out = NULL;
    size_t loaded_len = 0, meta_len = 0;
    int64_t loaded_opt = 0;
    CHECK(ckpt_load(dir, &loaded, &loaded_len, &loaded_opt, &meta_out, &meta_len) == 0);
    CHECK(loaded_opt > 0 && meta_len == strlen(meta) && memcmp(meta_out, meta, meta_len) == 0);
    int64_t l1 = forward_tinylm(params, in, B * S, tgt, B * S, B, S, H);
    int64_t l2 = forward_tinylm(loaded, in, B * S, tgt, B * S, B, S, H);
    CHECK(l1 > 0 && l2 > 0 && item(l1) == item(l2));
    CHECK(tensor_free(l1) == 0 && tensor_free(l2) == 0);
    CHECK(opt_free(loaded_opt) == 0);
    for (const char *q = loaded; *q;) {
        if (*q >= '0' && *q <= '9') CHECK(tensor_free(strtoll(q, (char **)&q, 10)) == 0);
        else q++;
    }
    string_free(loaded);
    string_free(meta_out);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);

    /* teardown */
    CHECK(dist_shutdown() == 0);
    CHECK(opt_free(state) == 0);
    CHECK(scaler_free(scaler) == 0);
    const char *p = params;
    while (*p) {
        if (*p >= '0' && *p <= '9') CHECK(tensor_free(strtoll(p, (char **)&p, 10)) == 0);
        else p++;
    }
    string_free(params);
    CHECK(device_free(dev) == 0);
    CHECK(live_tensors() == t0 && live_devices() == d0 && live_opts() == o0 && live_scalers() == s0);
    printf("capi-client-loop: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
