/* A seeded hostile-call fuzzer over every exported function.
 *
 *   fuzz [calls] [seed]      (defaults: 200000 calls, a seed from the clock)
 *
 * Each step calls one exported function, chosen at random, with hostile
 * arguments: live handles of every kind, stale handles, wrong-kind handles,
 * invented numbers; valid, malformed, deeply nested, huge and non-UTF-8 JSON;
 * NULL for every pointer; NaN, ±inf, -0.0 and extreme integers; empty, 0-dim
 * and mismatched tensors of every dtype. It never passes a garbage non-NULL
 * pointer or a buffer shorter than the length it states: those are outside
 * the contract.
 *
 * After every call it checks the contract:
 *   - a failure returns the documented sentinel and sets a non-zero code with
 *     an "E_NAME: detail" message; a success leaves no error;
 *   - the live counters equal a model of every handle created, retained and
 *     freed, exactly (a success on a handle the model does not hold live, or
 *     a "new" handle equal to a live one, is a failure);
 * and at the end that everything freed brings the counters back to their
 * baseline and that RSS stayed bounded. A failure prints the seed and the
 * last calls; `fuzz <calls> <seed>` replays the run. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "dlpack_min.h"

/* ---------- randomness (xorshift64*, reproducible from the seed) ---------- */
static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static int below(int n) { return (int)(rnd() % (uint64_t)n); }
static int chance(int percent) { return below(100) < percent; }
#define PICK(arr) ((arr)[below((int)(sizeof(arr) / sizeof((arr)[0])))])

/* ---------- the call log: the last calls, printed on failure ---------- */
#define LOG_N 400
static char call_log[LOG_N][1024];
static long call_no;
static uint64_t seed;
static const char *current = "";

static void logcall(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call_log[call_no % LOG_N], sizeof call_log[0], fmt, ap);
    va_end(ap);
}

/* Appends to the current call's log line (results, new handles). */
static void logmore(const char *fmt, ...) {
    char *line = call_log[call_no % LOG_N];
    size_t n = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof call_log[0] - n, fmt, ap);
    va_end(ap);
}

static void fail(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "fuzz: FAILED at call %ld (seed %" PRIu64 "): ", call_no, seed);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    const char *le = enkai_tensor_last_error();
    fprintf(stderr, "\n  last error: %s\n  last calls (oldest first):\n", le ? le : "none");
    for (long i = call_no - LOG_N + 1; i <= call_no; i++)
        if (i >= 0) fprintf(stderr, "  #%ld %s\n", i, call_log[i % LOG_N]);
    fprintf(stderr, "replay: build/capi/fuzz %ld %" PRIu64 "\n", call_no + 1, seed);
    exit(1);
}

/* ---------- the error contract ---------- */
#define code_names enkai_code_names
#define N_CODES ENKAI_N_CODES
static long failures_by_code[N_CODES];

/* The call failed: a known non-zero code, and a message "E_NAME: detail".
 * E_INTERNAL is a caught panic: never acceptable. */
static void expect_error(void) {
    int code = enkai_tensor_last_error_code();
    const char *msg = enkai_tensor_last_error();
    if (code <= 0 || code >= N_CODES) fail("%s returned its sentinel with code %d", current, code);
    if (code == E_INTERNAL) fail("%s: internal error (a caught panic)", current);
    size_t n = strlen(code_names[code]);
    if (!msg || strncmp(msg, code_names[code], n) != 0 || strncmp(msg + n, ": ", 2) != 0 || !msg[n + 2])
        fail("%s: code %s but message %s", current, code_names[code], msg ? msg : "(null)");
    failures_by_code[code]++;
}

static void expect_ok(void) {
    if (enkai_tensor_last_error_code() != E_OK || enkai_tensor_last_error() != NULL)
        fail("%s succeeded but left an error", current);
}

static void outcome(int failed) {
    if (failed) expect_error();
    else expect_ok();
    logmore(failed ? " -> %s" : " -> ok", failed ? code_names[enkai_tensor_last_error_code()] : "");
}

/* ---------- the model of live handles ---------- */
/* K_Q: quantized tensors, a kind of their own (tag 6) that the tensor
 * functions take; the tensor counter counts them with the tensors. */
enum { K_TENSOR, K_DEVICE, K_OPT, K_SCALER, K_ST, K_Q, K_N };
static const char *const kind_names[K_N] = {"tensor", "device", "optimizer", "scaler", "safetensors", "quantized tensor"};
#define MAX_LIVE (1 << 17)
#define MAX_DEAD 512
typedef struct {
    int64_t h;
    int refs;
    /* An optimizer holds a reference to each of its params until it goes. */
    int64_t *held;
    int n_held;
} live_t;
static live_t live[K_N][MAX_LIVE];
static int n_live[K_N];
static int64_t dead[K_N][MAX_DEAD];
static int n_dead[K_N];
static int64_t baseline[K_N];

static int kind_of(int64_t h) {
    int64_t tag = h >> 48;
    return (h > 0 && tag >= 1 && tag <= K_N) ? (int)tag - 1 : -1;
}

static int find_live(int64_t h) {
    int k = kind_of(h);
    if (k < 0) return -1;
    for (int i = 0; i < n_live[k]; i++)
        if (live[k][i].h == h) return i;
    return -1;
}

/* A handle the call says it created, with one reference owned by us. */
static void model_new(int64_t h) {
    int k = kind_of(h);
    logmore(" new %" PRId64, h);
    if (k < 0) fail("%s returned %" PRId64 ", which is not a handle", current, h);
    if (find_live(h) >= 0) fail("%s handed out %" PRId64 ", which is already live", current, h);
    if (n_live[k] == MAX_LIVE) fail("model full");
    live[k][n_live[k]++] = (live_t){h, 1, NULL, 0};
}

static void model_retain(int64_t h) {
    int i = find_live(h);
    if (i < 0) fail("%s succeeded on %" PRId64 ", which is not live", current, h);
    live[kind_of(h)][i].refs++;
    logmore(" refs %d", live[kind_of(h)][i].refs);
}

static void model_free(int64_t h) {
    int i = find_live(h);
    if (i < 0) fail("%s succeeded on %" PRId64 ", which is not live", current, h);
    int k = kind_of(h);
    logmore(" refs %d", live[k][i].refs - 1);
    if (--live[k][i].refs == 0) {
        live_t gone = live[k][i];
        live[k][i] = live[k][--n_live[k]];
        dead[k][n_dead[k]++ % MAX_DEAD] = h;
        /* A freed optimizer releases its params, ignoring any the caller has
         * already freed with references it did not own (as the library does). */
        for (int j = 0; j < gone.n_held; j++)
            if (find_live(gone.held[j]) >= 0) model_free(gone.held[j]);
        free(gone.held);
    }
}

/* Parses a JSON integer list the library accepted or wrote. */
static int parse_list(const char *json, int64_t *out, int max) {
    int n = 0;
    const char *p = json;
    while (p && strchr(" \t\n\r", *p) && *p) p++;
    if (!p || *p != '[') fail("%s: %.80s is not a JSON list", current, json ? json : "(null)");
    for (p++; *p && *p != ']';) {
        if (strchr(", \t\n\r", *p)) {
            p++;
            continue;
        }
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || n == max) fail("%s: malformed or long list %.80s", current, json);
        out[n++] = v;
        p = end;
    }
    return n;
}

/* The integers of a JSON list: a malloc'ed array of *n (free it). */
static int64_t *list_of(const char *json, int *n) {
    int max = json ? (int)strlen(json) / 2 + 1 : 1;
    int64_t *hs = malloc(sizeof(int64_t) * (size_t)max);
    *n = parse_list(json, hs, max);
    return hs;
}

/* Optimizer `opt` now also holds a reference to each of hs[0..n). */
static void hold(int64_t opt, const int64_t *hs, int n) {
    int i = find_live(opt);
    if (i < 0 || kind_of(opt) != K_OPT) fail("%s: %" PRId64 " is not a live optimizer", current, opt);
    live_t *o = &live[K_OPT][i];
    o->held = realloc(o->held, sizeof(int64_t) * (size_t)(o->n_held + n + 1));
    for (int j = 0; j < n; j++) {
        model_retain(hs[j]);
        o->held[o->n_held++] = hs[j];
    }
}

/* Optimizer `opt` now also holds a reference to each handle of `list`. */
static void model_hold(int64_t opt, const char *list) {
    int n;
    int64_t *hs = list_of(list, &n);
    hold(opt, hs, n);
    free(hs);
}

/* A successful call that returns one of its own live arguments (no new reference). */
static void model_same(int64_t h) {
    if (find_live(h) < 0) fail("%s returned %" PRId64 ", which is not live", current, h);
}

/* Every handle in a JSON integer list the call created (0 entries skipped). */
static void model_new_list(const char *json) {
    int n;
    int64_t *hs = list_of(json, &n);
    for (int i = 0; i < n; i++)
        if (hs[i]) model_new(hs[i]);
    free(hs);
}

static int (*const release_of[K_N])(int64_t) = {enkai_tensor_free, enkai_tensor_device_free, enkai_tensor_opt_free,
                                                enkai_amp_scaler_free, enkai_safetensors_free, enkai_tensor_free};

static int64_t counted_with_tensors(void) { return 0; }

static int64_t (*const live_counter[K_N])(void) = {
    enkai_tensor_live_tensors, enkai_tensor_live_devices, enkai_tensor_live_opts, enkai_tensor_live_scalers,
    enkai_tensor_live_safetensors, counted_with_tensors};

static void check_counters(void) {
    for (int k = 0; k < K_N; k++) {
        if (k == K_Q) continue; /* counted with the tensors */
        int64_t got = live_counter[k](), want = baseline[k] + n_live[k] + (k == K_TENSOR ? n_live[K_Q] : 0);
        if (got != want) fail("after %s: %" PRId64 " live %ss, the model holds %" PRId64, current, got, kind_names[k], want);
    }
}

/* ---------- argument generators ---------- */
static char *deep_json, *huge_json, *huge_list;

static int64_t any_handle_of(int k) {
    int r = below(100);
    if (r < 80 && n_live[k]) return live[k][below(n_live[k])].h;
    if (r < 92 && n_dead[k]) return dead[k][below(n_dead[k] < MAX_DEAD ? n_dead[k] : MAX_DEAD)];
    static const int64_t invented[] = {0, -1, 1, INT64_MAX, INT64_MIN, (int64_t)1 << 53, (int64_t)1 << 48,
                                       ((int64_t)2 << 48) | 5, ((int64_t)5 << 48), ((int64_t)1 << 48) | 0x3fffff};
    return chance(70) ? PICK(invented) : (int64_t)rnd();
}

/* Usually a handle of kind `k`, sometimes one of another kind. */
static int64_t handle(int k) { return any_handle_of(chance(88) ? k : below(K_N)); }
/* Now and then a quantized tensor, which every op but the products refuses. */
static int64_t tensor(void) { return chance(5) ? any_handle_of(K_Q) : handle(K_TENSOR); }

static const char *hostile_string(void) {
    static const char *const s[] = {
        NULL, "", "[", "]", "[]", "[[]]", "[1,", "[1,2", "{}", "null", "\xff\xfe", "[\xc2\xa0" "1]", "[1]\xe3\x80\x80",
        "[1e309]", "[-1]", "[9223372036854775808]", "[0x10]", "[1.5]", "[\"a\"]", "cpu", "fp32", "{\"a\":",
        "[2,3]", "[-9223372036854775808]", "\t[1]\n", "[ ]",
    };
    int r = below(100);
    if (r < 4) return deep_json;
    if (r < 7) return huge_json;
    if (r < 9) return huge_list;
    return PICK(s);
}

static const char *shape_str(void) {
    static const char *const s[] = {"[]", "[1]", "[2]", "[3]", "[4]", "[2,3]", "[3,2]", "[0]", "[2,0]", "[1,1,3,0]",
                                    "[4,4]", "[2,1,3]", "[1,4]", "[3,3]", "[2,2,2]", "[1]", "[6]"};
    static const char *const bad[] = {"[-2]", "[1000000000000,1000000000000]", "[4611686018427387904]",
                                      "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                                      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]",
                                      "[2,-1]", "[100000,100000,100000]"};
    int r = below(100);
    if (r < 85) return PICK(s);
    if (r < 93) return PICK(bad);
    return hostile_string();
}

static const char *dtype_str(void) {
    static const char *const s[] = {"fp32", "fp32", "fp32", "fp64", "bf16", "fp16", "int64", "int32", "bool", "uint8",
                                    "f32", "i64", "u8", "complex64", "complex128"};
    static const char *const bad[] = {"fp8", "FP32", "float", "int8", "", " fp32", "fp32 "};
    int r = below(100);
    if (r < 88) return PICK(s);
    if (r < 96) return PICK(bad);
    return hostile_string();
}

static double dbl(void) {
    static const double s[] = {0.0, -0.0, 1.0, 0.5, 2.0, -1.0, 1e-3, 1e-8, 1e308, -1e308, 5e-324, 65504.0, 1e39,
                               3.0, 0.9, 0.999, 1e-5};
    if (chance(10)) return NAN;
    if (chance(5)) return chance(50) ? INFINITY : -INFINITY;
    return PICK(s);
}

static int64_t int_arg(void) {
    static const int64_t s[] = {0, 1, 2, 3, -1, -2, 4, 8, INT64_MAX, INT64_MIN, (int64_t)1 << 40, (int64_t)1 << 53,
                                INT32_MAX, (int64_t)INT32_MAX + 1, 0, 1, -1};
    return PICK(s);
}

static int64_t dim_arg(void) { return chance(85) ? below(5) - 2 : int_arg(); }

/* A JSON handle list: live, stale, invented and wrong-kind handles, or hostile text. */
static char list_buf[4][512];
static const char *handle_list(int which, int kind) {
    if (chance(10)) return hostile_string();
    char *b = list_buf[which];
    int n = below(5), off = snprintf(b, sizeof list_buf[0], "[");
    for (int i = 0; i < n; i++)
        off += snprintf(b + off, sizeof list_buf[0] - off, "%s%" PRId64, i ? "," : "", handle(kind));
    snprintf(b + off, sizeof list_buf[0] - off, "]");
    return b;
}

/* A list of every live tensor (up to 24), for calls that should succeed more often. */
static const char *live_tensor_list(int which) {
    char *b = list_buf[which];
    int off = snprintf(b, sizeof list_buf[0], "[");
    int n = n_live[K_TENSOR] < 24 ? n_live[K_TENSOR] : 24, start = n_live[K_TENSOR] ? below(n_live[K_TENSOR]) : 0;
    for (int i = 0; i < n; i++)
        off += snprintf(b + off, sizeof list_buf[0] - off, "%s%" PRId64, i ? "," : "",
                        live[K_TENSOR][(start + i) % n_live[K_TENSOR]].h);
    snprintf(b + off, sizeof list_buf[0] - off, "]");
    return b;
}

static const char *lm_spec(void) {
    static const char *const s[] = {
        "{\"vocab_size\":16,\"seq_len\":4,\"d_model\":8,\"n_layers\":1,\"n_heads\":2}",
        "{\"vocab_size\":16,\"seq_len\":4,\"d_model\":8,\"n_layers\":1,\"n_heads\":2,\"norm\":\"rmsnorm\","
        "\"activation\":\"silu\",\"tie_embeddings\":true,\"ff_mult\":2,\"dropout\":0.1}",
        "{\"vocab_size\":16,\"seq_len\":4,\"d_model\":8,\"n_layers\":1099511627776,\"n_heads\":2}",
        "{\"vocab_size\":4611686018427387904,\"seq_len\":4,\"d_model\":8,\"n_layers\":1,\"n_heads\":2}",
        "{\"vocab_size\":16,\"seq_len\":4,\"d_model\":8,\"n_layers\":1,\"n_heads\":3}",
        "{\"vocab_size\":16}",
        "{\"vocab_size\":16,\"seq_len\":4,\"d_model\":8,\"n_layers\":1,\"n_heads\":2,\"dropout\":2}",
    };
    return chance(90) ? PICK(s) : hostile_string();
}

/* Out-pointers: valid, or NULL now and then. */
#define MAYBE_NULL(p) (chance(6) ? NULL : (p))

static uint32_t ids[64];
static unsigned char data_buf[4096], copy_buf[1 << 16];
static char ckpt_root[256];
static int64_t cpu;

/* Checkpoint directories: 0-2 take plain saves, 3-5 ranked ones; loads read any.
 * What the last successful save into each wrote, so that a load knows which
 * of the params it creates the restored optimizer holds. A ranked save (no
 * process group) returns once its shard is in the pending round, which
 * commits when every rank of its world has a shard there: the model keeps
 * the pending shards and the committed round's (worlds are at most 8 here:
 * int_arg's valid ones). */
#define N_DIRS 6
#define MAX_RANKS 8
typedef struct {
    int saved, n_params, has_opt, n_idx;
    int *idx; /* positions in the saved list of the optimizer's params */
} ckpt_record_t;
static ckpt_record_t ckpt_record[N_DIRS];            /* plain directories: the latest save */
static ckpt_record_t ckpt_rank[N_DIRS][MAX_RANKS];   /* ranked: the committed round's shards */
static ckpt_record_t ckpt_pending[N_DIRS][MAX_RANKS];
static int ckpt_world[N_DIRS];                       /* ranked: the committed round's world, 0 if none */
static int ckpt_which = -1;

static const char *ckpt_dir(int ranked) {
    static char d[320];
    static const char *const bad[] = {"", "/proc/self/nonexistent/x", "/dev/null", NULL};
    ckpt_which = -1;
    if (chance(8)) return PICK(bad);
    ckpt_which = (ranked ? 3 : 0) + below(3);
    snprintf(d, sizeof d, "%s/c%d", ckpt_root, ckpt_which);
    return d;
}

/* ---------- the calls: one function each, over every export ---------- */
static void t_new(int64_t h) {
    outcome(h == 0);
    if (h) model_new(h);
}

#define OP(name) static void op_##name(void)
#define CALL(fn) (current = #fn)

OP(create) {
    const char *s = shape_str(), *d = dtype_str();
    int64_t dev = handle(K_DEVICE), h;
    switch (below(4)) {
    case 0: CALL(enkai_tensor_randn); logcall("randn(%.40s, %.8s, %" PRId64 ")", s ? s : "NULL", d ? d : "NULL", dev);
        h = enkai_tensor_randn(s, d, dev); break;
    case 1: CALL(enkai_tensor_zeros); logcall("zeros(%.40s, %.8s, %" PRId64 ")", s ? s : "NULL", d ? d : "NULL", dev);
        h = enkai_tensor_zeros(s, d, dev); break;
    case 2: CALL(enkai_tensor_ones); logcall("ones(%.40s, %.8s, %" PRId64 ")", s ? s : "NULL", d ? d : "NULL", dev);
        h = enkai_tensor_ones(s, d, dev); break;
    default: {
        double v = dbl();
        CALL(enkai_tensor_full); logcall("full(%.40s, %g, %.8s, %" PRId64 ")", s ? s : "NULL", v, d ? d : "NULL", dev);
        h = enkai_tensor_full(s, v, d, dev);
    }
    }
    t_new(h);
}

OP(from_data) {
    const char *s = shape_str(), *d = dtype_str();
    size_t n = chance(80) ? (size_t)below(97) : (size_t)below((int)sizeof data_buf + 1);
    const void *p = chance(5) ? NULL : data_buf;
    int64_t dev = handle(K_DEVICE);
    CALL(enkai_tensor_from_data); logcall("from_data(%s, %zu, %.40s, %.8s, %" PRId64 ")", p ? "buf" : "NULL", n, s ? s : "NULL", d ? d : "NULL", dev);
    t_new(enkai_tensor_from_data(p, n, s, d, dev));
}

OP(ids_u32) {
    size_t n = (size_t)below(65);
    int64_t b = chance(80) ? below(5) : int_arg(), s = chance(80) ? below(17) : int_arg(), dev = handle(K_DEVICE);
    const uint32_t *p = chance(5) ? NULL : ids;
    CALL(enkai_tensor_ids_u32); logcall("ids_u32(%s, %zu, %" PRId64 ", %" PRId64 ", %" PRId64 ")", p ? "ids" : "NULL", n, b, s, dev);
    t_new(enkai_tensor_ids_u32(p, n, b, s, dev));
}

OP(device) {
    static const char *const specs[] = {"cpu", "cpu", "auto", "cuda", "cuda:0", "cuda:7", "cpu:0", "gpu", "", "cuda:-1",
                                        "cuda:99999999999999999999"};
    const char *s = chance(90) ? PICK(specs) : hostile_string();
    CALL(enkai_tensor_device); logcall("device(%.40s)", s ? s : "NULL");
    t_new(enkai_tensor_device(s));
}

static void retain_free(int k, int (*retain)(int64_t), int (*release)(int64_t), const char *rn, const char *fn) {
    int64_t h = handle(k);
    if (chance(35)) {
        current = rn; logcall("%s(%" PRId64 ")", rn, h);
        int r = retain(h);
        outcome(r != 0);
        if (r == 0) model_retain(h);
    } else {
        current = fn; logcall("%s(%" PRId64 ")", fn, h);
        int r = release(h);
        outcome(r != 0);
        if (r == 0) model_free(h);
    }
}

OP(retain_free) {
    switch (below(5)) {
    case 0: retain_free(K_TENSOR, enkai_tensor_retain, enkai_tensor_free, "enkai_tensor_retain", "enkai_tensor_free"); break;
    case 4: retain_free(K_Q, enkai_tensor_retain, enkai_tensor_free, "enkai_tensor_retain", "enkai_tensor_free"); break;
    case 1: retain_free(K_DEVICE, enkai_tensor_device_retain, enkai_tensor_device_free, "enkai_tensor_device_retain", "enkai_tensor_device_free"); break;
    case 2: retain_free(K_OPT, enkai_opt_retain, enkai_tensor_opt_free, "enkai_opt_retain", "enkai_tensor_opt_free"); break;
    default: retain_free(K_SCALER, enkai_amp_scaler_retain, enkai_amp_scaler_free, "enkai_amp_scaler_retain", "enkai_amp_scaler_free");
    }
}

OP(binary) {
    int64_t a = tensor(), b = tensor(), h;
    static const char *const names[] = {"matmul", "add", "sub", "mul", "div", "embedding", "cross_entropy"};
    int w = below(7);
    current = names[w]; logcall("%s(%" PRId64 ", %" PRId64 ")", names[w], a, b);
    switch (w) {
    case 0: h = enkai_tensor_matmul(a, b); break;
    case 1: h = enkai_tensor_add(a, b); break;
    case 2: h = enkai_tensor_sub(a, b); break;
    case 3: h = enkai_tensor_mul(a, b); break;
    case 4: h = enkai_tensor_div(a, b); break;
    case 5: h = enkai_tensor_embedding(a, b); break;
    default: h = enkai_tensor_cross_entropy(a, b);
    }
    t_new(h);
}

OP(quant) {
    int64_t x = tensor(), h;
    static const char *const names[] = {"enkai_quantize_per_channel", "enkai_quantize_q8_0", "enkai_dequantize",
                                        "enkai_quantized_scales", "linear", "matmul"};
    int w = below(6);
    int64_t axis = dim_arg(), wt = chance(70) ? any_handle_of(K_Q) : tensor(), b = chance(50) ? tensor() : 0;
    current = names[w]; logcall("%s(%" PRId64 ", axis %" PRId64 ", w %" PRId64 ", b %" PRId64 ")", names[w], x, axis, wt, b);
    switch (w) {
    case 0: h = enkai_quantize_per_channel(x, axis); break;
    case 1: h = enkai_quantize_q8_0(x); break;
    case 2: h = enkai_dequantize(chance(80) ? any_handle_of(K_Q) : x); break;
    case 3: h = enkai_quantized_scales(chance(80) ? any_handle_of(K_Q) : x); break;
    case 4: h = enkai_tensor_linear(x, wt, b); break;
    default: h = enkai_tensor_matmul(x, wt);
    }
    t_new(h);
}

OP(unary) {
    int64_t x = tensor(), h;
    static const char *const names[] = {"relu", "sigmoid", "tanh", "gelu", "detach", "dropout", "softmax", "sum", "mean"};
    int w = below(9);
    int64_t d = dim_arg();
    double p = chance(70) ? 0.5 : dbl();
    int k = below(3) - 1;
    current = names[w]; logcall("%s(%" PRId64 ", dim %" PRId64 ", p %g, k %d)", names[w], x, d, p, k);
    switch (w) {
    case 0: h = enkai_tensor_relu(x); break;
    case 1: h = enkai_tensor_sigmoid(x); break;
    case 2: h = enkai_tensor_tanh(x); break;
    case 3: h = enkai_tensor_gelu(x); break;
    case 4: h = enkai_tensor_detach(x); break;
    case 5: h = enkai_tensor_dropout(x, p, k); break;
    case 6: h = enkai_tensor_softmax(x, d); break;
    case 7: h = enkai_tensor_sum(x, d, k); break;
    default: h = enkai_tensor_mean(x, d, k);
    }
    t_new(h);
}

OP(layout) {
    int64_t x = tensor(), h;
    int w = below(7);
    int64_t a = dim_arg(), b = dim_arg(), c = chance(80) ? below(6) - 1 : int_arg(), st = chance(80) ? below(3) : int_arg();
    static const char *const targets[] = {"[-1]", "[2,-1]", "[-1,2]", "[1,-1,1]", "[6]", "[3,2]", "[0]", "[-1,-1]", "[]"};
    const char *s = chance(85) ? PICK(targets) : shape_str();
    switch (w) {
    case 0: CALL(enkai_tensor_reshape); logcall("reshape(%" PRId64 ", %.40s)", x, s ? s : "NULL"); h = enkai_tensor_reshape(x, s); break;
    case 1: CALL(enkai_tensor_view); logcall("view(%" PRId64 ", %.40s)", x, s ? s : "NULL"); h = enkai_tensor_view(x, s); break;
    case 2: CALL(enkai_tensor_transpose); logcall("transpose(%" PRId64 ", %" PRId64 ", %" PRId64 ")", x, a, b); h = enkai_tensor_transpose(x, a, b); break;
    case 3: CALL(enkai_tensor_slice); logcall("slice(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ")", x, a, b, c, st);
        h = enkai_tensor_slice(x, a, b, c, st); break;
    case 4: {
        const char *l = chance(50) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
        CALL(enkai_tensor_concat); logcall("concat(%.60s, %" PRId64 ")", l ? l : "NULL", a); h = enkai_tensor_concat(l, a); break;
    }
    case 5: {
        static const char *const names[] = {"torch", "cpu", "cuda", ""};
        const char *n = chance(90) ? PICK(names) : hostile_string();
        CALL(enkai_tensor_to_backend); logcall("to_backend(%" PRId64 ", %.20s)", x, n ? n : "NULL"); h = enkai_tensor_to_backend(x, n);
        break;
    }
    default: {
        const char *d = dtype_str();
        CALL(enkai_tensor_to_dtype); logcall("to_dtype(%" PRId64 ", %.8s)", x, d ? d : "NULL"); h = enkai_tensor_to_dtype(x, d);
    }
    }
    t_new(h);
}

OP(nn) {
    int64_t x = tensor(), w = tensor(), b = tensor(), m = tensor(), h;
    int64_t d = dim_arg(), mt = chance(80) ? below(3) : int_arg();
    double eps = chance(80) ? 1e-5 : dbl();
    switch (below(6)) {
    case 0: CALL(enkai_tensor_layernorm); logcall("layernorm(%" PRId64 ", %" PRId64 ", %" PRId64 ", %g)", x, w, b, eps);
        h = enkai_tensor_layernorm(x, w, b, eps); break;
    case 1: CALL(enkai_tensor_linear); logcall("linear(%" PRId64 ", %" PRId64 ", %" PRId64 ")", x, w, b); h = enkai_tensor_linear(x, w, b); break;
    case 2: CALL(enkai_tensor_masked_softmax); logcall("masked_softmax(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ")", x, m, d, mt);
        h = enkai_tensor_masked_softmax(x, m, d, mt); break;
    case 3: CALL(enkai_tensor_masked_softmax_backward);
        logcall("masked_softmax_backward(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ")", x, w, m, d);
        h = enkai_tensor_masked_softmax_backward(x, w, m, d); break;
    case 4: {
        int64_t dev = handle(K_DEVICE);
        CALL(enkai_tensor_to_device); logcall("to_device(%" PRId64 ", %" PRId64 ")", x, dev); h = enkai_tensor_to_device(x, dev); break;
    }
    default: {
        CALL(enkai_tensor_layernorm_backward);
        logcall("layernorm_backward(%" PRId64 ", %" PRId64 ", %" PRId64 ", %g, %" PRId64 ")", x, w, b, eps, m);
        struct EnkaiSlice s = enkai_tensor_layernorm_backward(x, w, b, eps, m);
        outcome(s.ptr == NULL);
        if (s.ptr) {
            if (s.len != strlen((char *)s.ptr)) fail("layernorm_backward: length %zu for %s", s.len, (char *)s.ptr);
            model_new_list((char *)s.ptr);
            enkai_free(s.ptr, s.len);
        } else if (s.len != 0) fail("layernorm_backward: NULL with length %zu", s.len);
        return;
    }
    }
    t_new(h);
}

OP(data_out) {
    int64_t t = tensor();
    switch (below(6)) {
    case 0: {
        size_t n = chance(80) ? (size_t)below(600) : sizeof copy_buf;
        void *dst = chance(5) ? NULL : copy_buf;
        CALL(enkai_tensor_copy_to); logcall("copy_to(%" PRId64 ", %s, %zu)", t, dst ? "buf" : "NULL", n);
        outcome(enkai_tensor_copy_to(t, dst, n) != 0);
        break;
    }
    case 1: {
        CALL(enkai_tensor_item); logcall("item(%" PRId64 ")", t);
        double v = enkai_tensor_item(t);
        /* NaN is also a value: the code tells them apart. */
        outcome(isnan(v) && enkai_tensor_last_error_code() != E_OK);
        break;
    }
    case 2: {
        CALL(enkai_tensor_shape); logcall("shape(%" PRId64 ")", t);
        struct EnkaiSlice s = enkai_tensor_shape(t);
        outcome(s.ptr == NULL);
        if (s.ptr) enkai_free(s.ptr, s.len);
        break;
    }
    case 3: {
        char *out = NULL;
        size_t len = 0;
        char **po = MAYBE_NULL(&out);
        size_t *pl = MAYBE_NULL(&len);
        /* the two string-out queries share one shape */
        int r;
        if (chance(50)) {
            CALL(enkai_tensor_dtype); logcall("dtype(%" PRId64 ", %s, %s)", t, po ? "&out" : "NULL", pl ? "&len" : "NULL");
            r = enkai_tensor_dtype(t, po, pl);
        } else {
            CALL(enkai_tensor_device_name); logcall("device_name(%" PRId64 ", %s, %s)", t, po ? "&out" : "NULL", pl ? "&len" : "NULL");
            r = enkai_tensor_device_name(t, po, pl);
        }
        outcome(r != 0);
        if (r == 0) enkai_tensor_string_free(out);
        break;
    }
    case 4: {
        CALL(enkai_tensor_numel); logcall("numel(%" PRId64 ")", t);
        outcome(enkai_tensor_numel(t) == -1);
        break;
    }
    default: {
        /* freeing NULL is allowed and clears nothing */
        CALL(enkai_free); logcall("enkai_free(NULL, 0) + string_free(NULL)");
        enkai_free(NULL, 0);
        enkai_tensor_string_free(NULL);
    }
    }
}

OP(autograd) {
    int64_t t = tensor();
    switch (below(9)) {
    case 0: {
        CALL(enkai_tensor_require_grad); logcall("require_grad(%" PRId64 ")", t);
        int64_t r = enkai_tensor_require_grad(t);
        outcome(r == 0);
        if (r) {
            if (r != t) fail("require_grad returned %" PRId64 ", not its argument", r);
            model_same(r);
        }
        break;
    }
    case 1: {
        int64_t loss = t;
        CALL(enkai_tensor_backward); logcall("backward(%s%" PRId64 ")", chance(30) ? "sum of " : "", t);
        if (call_log[call_no % LOG_N][9] == 's') {
            /* a scalar that may require grad */
            loss = enkai_tensor_sum(t, -1, 0);
            if (loss) model_new(loss);
        }
        outcome(enkai_tensor_backward(loss) != 0);
        break;
    }
    case 2: {
        CALL(enkai_tensor_grad); logcall("grad(%" PRId64 ")", t);
        int64_t g = enkai_tensor_grad(t);
        if (g == 0 && enkai_tensor_last_error_code() == E_OK) break; /* no grad: not an error */
        t_new(g);
        break;
    }
    case 3: {
        char *out = NULL;
        size_t len = 0;
        const char *l = chance(50) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
        char **po = MAYBE_NULL(&out);
        size_t *pl = MAYBE_NULL(&len);
        CALL(enkai_tensor_grad_multi); logcall("grad_multi(%.60s)", l ? l : "NULL");
        int r = enkai_tensor_grad_multi(l, po, pl);
        outcome(r != 0);
        if (r == 0) {
            model_new_list(out);
            enkai_tensor_string_free(out);
        }
        break;
    }
    case 4: CALL(enkai_tensor_zero_grad); logcall("zero_grad(%" PRId64 ")", t); outcome(enkai_tensor_zero_grad(t) != 0); break;
    case 5: {
        const char *l = chance(50) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
        switch (below(4)) {
        case 0: CALL(enkai_tensor_zero_grad_multi); logcall("zero_grad_multi(%.60s)", l ? l : "NULL");
            outcome(enkai_tensor_zero_grad_multi(l) != 0); break;
        case 1: CALL(enkai_tensor_check_finite_multi); logcall("check_finite_multi(%.60s)", l ? l : "NULL");
            outcome(enkai_tensor_check_finite_multi(l) != 0); break;
        case 2: {
            double s = dbl();
            CALL(enkai_tensor_scale_grads_multi); logcall("scale_grads_multi(%.60s, %g)", l ? l : "NULL", s);
            outcome(enkai_tensor_scale_grads_multi(l, s) != 0); break;
        }
        default: {
            double mx = dbl(), nt = chance(70) ? 2.0 : dbl(), tot = 0;
            double *pt = MAYBE_NULL(&tot);
            CALL(enkai_tensor_clip_grad_norm_multi); logcall("clip_grad_norm_multi(%.60s, %g, %g, %s)", l ? l : "NULL", mx, nt, pt ? "&tot" : "NULL");
            outcome(enkai_tensor_clip_grad_norm_multi(l, mx, nt, pt) != 0);
        }
        }
        break;
    }
    case 6: {
        int64_t seedv = int_arg();
        CALL(enkai_tensor_manual_seed); logcall("manual_seed(%" PRId64 ")", seedv);
        outcome(enkai_tensor_manual_seed(seedv) != 0);
        break;
    }
    case 7: {
        int flag = chance(50);
        if (chance(50)) {
            CALL(enkai_tensor_requires_grad_); logcall("requires_grad_(%" PRId64 ", %d)", t, flag);
            outcome(enkai_tensor_requires_grad_(t, flag) != 0);
        } else {
            CALL(enkai_tensor_requires_grad); logcall("requires_grad(%" PRId64 ")", t);
            int r = enkai_tensor_requires_grad(t);
            if (r != -1 && r != 0 && r != 1) fail("requires_grad returned %d", r);
            outcome(r == -1);
        }
        break;
    }
    default: {
        /* a real little graph: leaf → op → sum → backward, so grads exist to fuzz */
        CALL(enkai_tensor_backward); logcall("backward(sum(tanh(leaf)))");
        int64_t leaf = enkai_tensor_randn("[2,3]", "fp32", cpu);
        model_new(leaf);
        if (enkai_tensor_require_grad(leaf) != leaf) fail("require_grad on a fresh fp32 leaf failed");
        int64_t y = enkai_tensor_tanh(leaf);
        model_new(y);
        int64_t s = enkai_tensor_sum(y, -1, 0);
        model_new(s);
        outcome(enkai_tensor_backward(s) != 0);
    }
    }
}

OP(optim) {
    int64_t o = handle(K_OPT);
    const char *l = chance(50) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
    double lr = chance(80) ? 1e-3 : dbl(), b1 = chance(85) ? 0.9 : dbl(), b2 = chance(85) ? 0.999 : dbl(),
           eps = chance(85) ? 1e-8 : dbl(), wd = chance(85) ? 0.01 : dbl();
    switch (below(13)) {
    case 0: CALL(enkai_opt_adamw_create); logcall("adamw_create(%.60s, %g, %g, %g, %g, %g)", l ? l : "NULL", lr, b1, b2, eps, wd);
        {
            int64_t h = enkai_opt_adamw_create(l, lr, b1, b2, eps, wd);
            t_new(h);
            if (h) model_hold(h, l);
        }
        break;
    case 1: CALL(enkai_opt_adamw_step); logcall("adamw_step(%" PRId64 ")", o); outcome(enkai_opt_adamw_step(o) != 0); break;
    case 2: CALL(enkai_opt_shard); logcall("opt_shard(%" PRId64 ")", o); outcome(enkai_opt_shard(o) != 0); break;
    case 3: CALL(enkai_opt_state_bytes); logcall("opt_state_bytes(%" PRId64 ")", o); outcome(enkai_opt_state_bytes(o) == -1); break;
    case 4: CALL(enkai_opt_add_param_group); logcall("add_param_group(%" PRId64 ", %.60s, %g, %g)", o, l ? l : "NULL", lr, wd);
        if (enkai_opt_add_param_group(o, l, lr, wd) == 0) outcome(0), model_hold(o, l);
        else outcome(1);
        break;
    case 5: {
        int64_t g = chance(80) ? below(3) : int_arg();
        CALL(enkai_opt_set_lr); logcall("set_lr(%" PRId64 ", %" PRId64 ", %g)", o, g, lr); outcome(enkai_opt_set_lr(o, g, lr) != 0); break;
    }
    case 6: {
        int64_t g = chance(80) ? below(3) : int_arg();
        CALL(enkai_opt_param_group_step); logcall("param_group_step(%" PRId64 ", %" PRId64 ")", o, g);
        outcome(enkai_opt_param_group_step(o, g) != 0); break;
    }
    case 7: {
        int64_t p = tensor(), g = tensor(), st = chance(50) ? 0 : handle(K_OPT);
        CALL(enkai_tensor_adamw_step); logcall("tensor_adamw_step(%" PRId64 ", %" PRId64 ", %" PRId64 ")", p, g, st);
        int64_t r = enkai_tensor_adamw_step(p, g, st, lr, b1, b2, eps, wd);
        outcome(r == 0);
        if (r && st == 0) {
            char one[32];
            snprintf(one, sizeof one, "[%" PRId64 "]", p);
            model_new(r);
            model_hold(r, one);
        } else if (r && r != st) fail("adamw_step returned state %" PRId64 ", not %" PRId64, r, st);
        break;
    }
    case 9: {
        double mom = chance(70) ? 0.9 : dbl(), damp = chance(80) ? 0.0 : dbl();
        int nest = chance(80) ? (int)below(2) : (int)int_arg();
        CALL(enkai_opt_sgd_create); logcall("sgd_create(%.60s, %g, %g, %g, %g, %d)", l ? l : "NULL", lr, mom, damp, wd, nest);
        int64_t h = enkai_opt_sgd_create(l, lr, mom, damp, wd, nest);
        t_new(h);
        if (h) model_hold(h, l);
        break;
    }
    case 10: {
        int ams = chance(80) ? (int)below(2) : (int)int_arg();
        CALL(enkai_opt_adam_create); logcall("adam_create(%.60s, %g, %g, %g, %g, %g, %d)", l ? l : "NULL", lr, b1, b2, eps, wd, ams);
        int64_t h = enkai_opt_adam_create(l, lr, b1, b2, eps, wd, ams);
        t_new(h);
        if (h) model_hold(h, l);
        break;
    }
    case 11: CALL(enkai_opt_step); logcall("opt_step(%" PRId64 ")", o); outcome(enkai_opt_step(o) != 0); break;
    case 12: {
        static const char *const specs[] = {"{\"kind\":\"step\",\"step_size\":3,\"gamma\":0.5}",
            "{\"kind\":\"linear_warmup\",\"warmup_steps\":4,\"start_factor\":0.1}",
            "{\"kind\":\"cosine\",\"warmup_steps\":2,\"total_steps\":10,\"min_lr\":0.0}", "{\"kind\":\"cosine\"}", "[1]", "", NULL};
        const char *spec = specs[below(7)];
        int64_t st = chance(80) ? below(20) : int_arg();
        double out = 0.0;
        CALL(enkai_lr_schedule); logcall("lr_schedule(%.60s, %" PRId64 ", %g)", spec ? spec : "NULL", st, lr);
        outcome(enkai_lr_schedule(spec, st, lr, chance(90) ? &out : NULL) != 0);
        break;
    }
    default: {
        const char *gl = chance(50) ? handle_list(1, K_TENSOR) : live_tensor_list(1);
        int64_t st = chance(50) ? 0 : handle(K_OPT);
        CALL(enkai_tensor_adamw_step_multi); logcall("adamw_step_multi(%.60s, %.60s, %" PRId64 ")", l ? l : "NULL", gl ? gl : "NULL", st);
        int64_t r = enkai_tensor_adamw_step_multi(l, gl, st, lr, b1, b2, eps, wd);
        outcome(r == 0);
        if (r && st == 0) model_new(r), model_hold(r, l);
        else if (r && r != st) fail("adamw_step_multi returned state %" PRId64 ", not %" PRId64, r, st);
    }
    }
}

OP(amp) {
    int64_t s = handle(K_SCALER), t = tensor(), o = handle(K_OPT);
    const char *l = chance(50) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
    switch (below(9)) {
    case 0: {
        double a = chance(70) ? 65536.0 : dbl(), g = chance(80) ? 2.0 : dbl(), b = chance(80) ? 0.5 : dbl();
        int64_t iv = chance(80) ? 2000 : int_arg();
        CALL(enkai_amp_scaler_create); logcall("scaler_create(%g, %g, %g, %" PRId64 ")", a, g, b, iv);
        t_new(enkai_amp_scaler_create(a, g, b, iv));
        break;
    }
    case 1: CALL(enkai_amp_scale_loss); logcall("scale_loss(%" PRId64 ", %" PRId64 ")", t, s); t_new(enkai_amp_scale_loss(t, s)); break;
    case 2: {
        int fi = 0;
        int *pf = MAYBE_NULL(&fi);
        CALL(enkai_amp_unscale_grads); logcall("unscale_grads(%.60s, %" PRId64 ", %s)", l ? l : "NULL", s, pf ? "&fi" : "NULL");
        outcome(enkai_amp_unscale_grads(l, s, pf) != 0);
        break;
    }
    case 3: {
        int fi = below(3) - 1;
        CALL(enkai_amp_scaler_update); logcall("scaler_update(%" PRId64 ", %d)", s, fi); outcome(enkai_amp_scaler_update(s, fi) != 0); break;
    }
    case 4: {
        CALL(enkai_amp_scaler_get_scale); logcall("get_scale(%" PRId64 ")", s);
        double v = enkai_amp_scaler_get_scale(s);
        outcome(isnan(v));
        break;
    }
    case 5: CALL(enkai_autocast_enter); logcall("autocast_enter()"); outcome(enkai_autocast_enter() != 0); break;
    case 6: CALL(enkai_autocast_exit); logcall("autocast_exit()"); outcome(enkai_autocast_exit() != 0); break;
    case 7: {
        int64_t dev = handle(K_DEVICE);
        const char *d = chance(70) ? (chance(50) ? "bf16" : "fp16") : dtype_str();
        CALL(enkai_autocast_enter_device); logcall("autocast_enter_device(%" PRId64 ", %.8s)", dev, d ? d : "NULL");
        outcome(enkai_autocast_enter_device(dev, d) != 0);
        break;
    }
    default: CALL(enkai_amp_step); logcall("amp_step(%" PRId64 ", %" PRId64 ", %.60s, %" PRId64 ")", t, s, l ? l : "NULL", o);
        outcome(enkai_amp_step(t, s, l, o) != 0);
    }
}

OP(backend) {
    char *out = NULL;
    size_t len = 0;
    char **po = MAYBE_NULL(&out);
    size_t *pl = MAYBE_NULL(&len);
    switch (below(5)) {
    case 4: {
        /* Grad mode: 0 and 1 set it and return the previous mode; anything else is refused. */
        int mode = chance(80) ? (int)below(2) : (int)int_arg();
        int before = enkai_is_grad_enabled();
        CALL(enkai_set_grad_enabled); logcall("set_grad_enabled(%d)", mode);
        int r = enkai_set_grad_enabled(mode);
        outcome(r < 0);
        if ((mode == 0 || mode == 1) ? r != before : r != -1) fail("set_grad_enabled(%d) returned %d (was %d)", mode, r, before);
        CALL(enkai_is_grad_enabled);
        if (enkai_is_grad_enabled() != (r < 0 ? before : mode)) fail("is_grad_enabled is not the mode just set");
        expect_ok(); /* never fails; clears the error like every entry */
        break;
    }
    case 3: {
        /* Small valid counts keep the pool cheap; the rest must be refused. */
        int64_t n = chance(60) ? 1 + below(2) : int_arg();
        CALL(enkai_set_num_threads); logcall("set_num_threads(%" PRId64 ")", n);
        int r = enkai_set_num_threads(n);
        outcome(r != 0);
        if ((n < 1 || n > 1024) != (r != 0)) fail("set_num_threads(%" PRId64 ") returned %d", n, r);
        if (r == 0) {
            CALL(enkai_get_num_threads);
            if (enkai_get_num_threads() != n) fail("get_num_threads is not the count just set");
            expect_ok(); /* never fails; clears the error like every entry */
        }
        break;
    }
    case 0: CALL(enkai_backend_list); logcall("backend_list()");
        if (enkai_backend_list(po, pl) == 0) expect_ok(), enkai_tensor_string_free(out);
        else expect_error();
        break;
    case 1: CALL(enkai_backend_current); logcall("backend_current()");
        if (enkai_backend_current(po, pl) == 0) expect_ok(), enkai_tensor_string_free(out);
        else expect_error();
        break;
    default: {
        static const char *const names[] = {"torch", "cpu", "cuda", "native", ""};
        const char *n = chance(90) ? PICK(names) : hostile_string();
        CALL(enkai_backend_set); logcall("backend_set(%.20s)", n ? n : "NULL");
        outcome(enkai_backend_set(n) != 0);
    }
    }
}

OP(library) {
    switch (below(3)) {
    case 0: {
        CALL(enkai_abi_version); logcall("abi_version()");
        if (enkai_abi_version() >> 32 == 0) fail("abi_version major is 0");
        expect_ok();
        break;
    }
    case 1:
        /* The error readers do not clear the error they read. */
        CALL(enkai_tensor_last_error_code); logcall("last_error_code() twice");
        if (enkai_tensor_last_error_code() != enkai_tensor_last_error_code()) fail("reading the code changed it");
        break;
    default: CALL(enkai_tensor_live_tensors); logcall("live counters"); check_counters(); expect_ok();
    }
}

static char *params_of_tinylm;

OP(lm) {
    char *out = NULL;
    size_t len = 0;
    char **po = MAYBE_NULL(&out);
    size_t *pl = MAYBE_NULL(&len);
    int64_t dev = handle(K_DEVICE), sd = int_arg();
    const char *spec = lm_spec();
    const char *params = params_of_tinylm && chance(60) ? params_of_tinylm : handle_list(0, K_TENSOR);
    size_t n_in = (size_t)below(65), n_tgt = (size_t)below(65);
    const uint32_t *in = chance(5) ? NULL : ids, *tg = chance(5) ? NULL : ids;
    int64_t b = chance(70) ? 2 : int_arg(), s = chance(70) ? 4 : int_arg(), h = chance(80) ? 2 : int_arg();
    if (chance(50)) n_in = n_tgt = 8;
    switch (below(5)) {
    case 0: {
        int64_t v = chance(80) ? 16 : int_arg(), sq = chance(80) ? 4 : int_arg(), dm = chance(80) ? 8 : int_arg(),
                nl = chance(80) ? 1 : int_arg(), nh = chance(80) ? 2 : int_arg();
        CALL(enkai_tensor_tinylm_init); logcall("tinylm_init(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", dev %" PRId64 ")", v, sq, dm, nl, nh, dev);
        int r = enkai_tensor_tinylm_init(v, sq, dm, nl, nh, dev, sd, po, pl);
        outcome(r != 0);
        if (r == 0) {
            model_new_list(out);
            if (len != strlen(out)) fail("tinylm_init: out_len %zu for %zu bytes", len, strlen(out));
            free(params_of_tinylm);
            params_of_tinylm = out; /* kept for forward calls; its handles may be freed by others */
        }
        break;
    }
    case 1: {
        CALL(enkai_tensor_lm_init); logcall("lm_init(%.80s, dev %" PRId64 ")", spec ? spec : "NULL", dev);
        int r = enkai_tensor_lm_init(spec, dev, sd, po, pl);
        outcome(r != 0);
        if (r == 0) {
            model_new_list(out);
            enkai_tensor_string_free(out);
        }
        break;
    }
    case 2: CALL(enkai_tensor_forward_tinylm); logcall("forward_tinylm(%.60s, %zu, %zu, %" PRId64 ", %" PRId64 ", %" PRId64 ")", params ? params : "NULL", n_in, n_tgt, b, s, h);
        t_new(enkai_tensor_forward_tinylm(params, in, n_in, tg, n_tgt, b, s, h)); break;
    case 3: {
        int tr = below(3) - 1;
        CALL(enkai_tensor_forward_lm); logcall("forward_lm(%.60s, %.60s, %zu, %zu, %" PRId64 ", %" PRId64 ", %d)", params ? params : "NULL", spec ? spec : "NULL", n_in, n_tgt, b, s, tr);
        t_new(enkai_tensor_forward_lm(params, spec, in, n_in, tg, n_tgt, b, s, tr));
        break;
    }
    default: CALL(enkai_tensor_lm_logits); logcall("lm_logits(%.60s, %.60s, %zu, %" PRId64 ", %" PRId64 ")", params ? params : "NULL", spec ? spec : "NULL", n_in, b, s);
        t_new(enkai_tensor_lm_logits(params, spec, in, n_in, b, s));
    }
}

static void clear_record(ckpt_record_t *r) {
    free(r->idx);
    memset(r, 0, sizeof *r);
}

/* A save of `list` with optimizer `opt` (0: none) succeeded into ckpt_which,
 * as rank `rank` of `world` (a ranked save) or plainly (world 0). */
static void record_save(const char *list, int64_t opt, int64_t rank, int64_t world) {
    if (ckpt_which < 0) fail("%s succeeded on a bad directory", current);
    if (world && (rank < 0 || rank >= world || world > MAX_RANKS)) fail("%s succeeded as rank %" PRId64 " of %" PRId64, current, rank, world);
    ckpt_record_t *r = world ? &ckpt_pending[ckpt_which][rank] : &ckpt_record[ckpt_which];
    int64_t *hs = list_of(list, &r->n_params);
    r->saved = 1;
    r->has_opt = opt != 0;
    r->n_idx = 0;
    free(r->idx);
    r->idx = NULL;
    if (opt) {
        int i = find_live(opt);
        if (i < 0) fail("%s saved optimizer %" PRId64 ", which is not live", current, opt);
        live_t *o = &live[K_OPT][i];
        r->idx = malloc(sizeof(int) * (size_t)(o->n_held + 1));
        for (int j = 0; j < o->n_held; j++) {
            int at = -1;
            for (int k = 0; k < r->n_params && at < 0; k++)
                if (hs[k] == o->held[j]) at = k;
            if (at < 0) fail("%s saved optimizer param %" PRId64 " that is not in the list", current, o->held[j]);
            r->idx[r->n_idx++] = at;
        }
    }
    free(hs);
    if (!world) return;
    for (int k = 0; k < world; k++)
        if (!ckpt_pending[ckpt_which][k].saved) return;
    /* the round is complete: it is committed, and the pending round is gone */
    for (int k = 0; k < MAX_RANKS; k++) {
        clear_record(&ckpt_rank[ckpt_which][k]);
        ckpt_rank[ckpt_which][k] = ckpt_pending[ckpt_which][k];
        memset(&ckpt_pending[ckpt_which][k], 0, sizeof(ckpt_record_t));
        if (k >= world) clear_record(&ckpt_rank[ckpt_which][k]);
    }
    ckpt_world[ckpt_which] = (int)world;
}

/* A load from ckpt_which succeeded (as rank `rank`, or plainly when -1): the
 * new params, and the optimizer holding its share. */
static void record_load(const char *params, int64_t opt, int64_t rank) {
    if (ckpt_which < 0) fail("%s loaded from a bad directory", current);
    if (rank >= 0 && rank >= ckpt_world[ckpt_which]) fail("%s loaded rank %" PRId64 " of a committed world of %d", current, rank, ckpt_world[ckpt_which]);
    ckpt_record_t *r = rank >= 0 ? &ckpt_rank[ckpt_which][rank] : &ckpt_record[ckpt_which];
    if (!r->saved) fail("%s loaded from a directory never saved to", current);
    int n;
    int64_t *hs = list_of(params, &n);
    if (n != r->n_params) fail("%s loaded %d params, %d were saved", current, n, r->n_params);
    if ((opt != 0) != r->has_opt) fail("%s: optimizer %" PRId64 " loaded, saved: %d", current, opt, r->has_opt);
    for (int i = 0; i < n; i++) model_new(hs[i]);
    if (opt) {
        int64_t *held = malloc(sizeof(int64_t) * (size_t)(r->n_idx + 1));
        for (int j = 0; j < r->n_idx; j++) held[j] = hs[r->idx[j]];
        model_new(opt);
        hold(opt, held, r->n_idx);
        free(held);
    }
    free(hs);
}

OP(checkpoint) {
    int w = below(8);
    const char *dir = ckpt_dir(w == 2 || w == 3 || (w >= 4 && chance(50)));
    const char *l = chance(30) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
    const char *meta = chance(85) ? "{\"step\":1}" : hostile_string();
    int64_t o = chance(40) ? 0 : handle(K_OPT), s = handle(K_SCALER);
    int64_t rank = chance(80) ? 0 : int_arg(), world = chance(80) ? 1 : int_arg();
    char *outp = NULL, *outm = NULL;
    size_t lp = 0, lm_ = 0;
    int64_t oo = 0;
    int r = 1;
    switch (w) {
    case 0: CALL(enkai_checkpoint_save); logcall("ckpt_save(%.40s, %.60s, %" PRId64 ", %.20s)", dir ? dir : "NULL", l ? l : "NULL", o, meta ? meta : "NULL");
        r = enkai_checkpoint_save(dir, l, o, meta); break;
    case 1: CALL(enkai_checkpoint_save_amp); logcall("ckpt_save_amp(%.40s, %.60s, %" PRId64 ", %" PRId64 ")", dir ? dir : "NULL", l ? l : "NULL", o, s);
        r = enkai_checkpoint_save_amp(dir, l, o, s, meta); break;
    case 2: CALL(enkai_checkpoint_save_ranked); logcall("ckpt_save_ranked(%.40s, %" PRId64 ", %" PRId64 ", %.60s, %" PRId64 ")", dir ? dir : "NULL", rank, world, l ? l : "NULL", o);
        r = enkai_checkpoint_save_ranked(dir, rank, world, l, o, meta); break;
    case 3: CALL(enkai_checkpoint_save_ranked_amp); logcall("ckpt_save_ranked_amp(%.40s, %" PRId64 ", %" PRId64 ", %.60s, %" PRId64 ", %" PRId64 ")", dir ? dir : "NULL", rank, world, l ? l : "NULL", o, s);
        r = enkai_checkpoint_save_ranked_amp(dir, rank, world, l, o, s, meta); break;
    case 4:
    case 5: {
        int ranked = below(2);
        char **pp = MAYBE_NULL(&outp), **pm = MAYBE_NULL(&outm);
        size_t *plp = MAYBE_NULL(&lp), *plm = MAYBE_NULL(&lm_);
        int64_t *po = MAYBE_NULL(&oo);
        if (ranked) {
            CALL(enkai_checkpoint_load_ranked); logcall("ckpt_load_ranked(%.40s, %" PRId64 ")", dir ? dir : "NULL", rank);
            r = enkai_checkpoint_load_ranked(dir, rank, pp, plp, po, pm, plm);
        } else {
            CALL(enkai_checkpoint_load); logcall("ckpt_load(%.40s)", dir ? dir : "NULL");
            r = enkai_checkpoint_load(dir, pp, plp, po, pm, plm);
        }
        outcome(r != 0);
        if (r == 0) {
            record_load(outp, oo, ranked ? rank : -1);
            enkai_tensor_string_free(outp);
            enkai_tensor_string_free(outm);
        }
        return;
    }
    case 6: CALL(enkai_checkpoint_load_scaler); logcall("ckpt_load_scaler(%.40s)", dir ? dir : "NULL");
        t_new(enkai_checkpoint_load_scaler(dir)); return;
    default: CALL(enkai_checkpoint_load_ranked_scaler); logcall("ckpt_load_ranked_scaler(%.40s, %" PRId64 ")", dir ? dir : "NULL", rank);
        t_new(enkai_checkpoint_load_ranked_scaler(dir, rank)); return;
    }
    /* a save */
    outcome(r != 0);
    if (r == 0) record_save(l, o, rank, w >= 2 ? world : 0);
}

OP(dist) {
    const char *l = chance(50) ? handle_list(0, K_TENSOR) : live_tensor_list(0);
    int64_t t = tensor();
    /* A world of 1 needs no peers; a larger one must fail fast here (no
     * environment, and a short timeout), never wait for peers that never come. */
    int64_t world = chance(75) ? 1 : (chance(50) ? 2 : int_arg()), rank = chance(80) ? 0 : int_arg();
    switch (below(14)) {
    case 0: {
        int64_t dev = chance(80) ? -1 : int_arg(), sd = int_arg();
        CALL(enkai_dist_config); logcall("dist_config(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ")", world, rank, dev, sd);
        outcome(enkai_dist_config(world, rank, dev, sd) != 0);
        break;
    }
    case 1: CALL(enkai_dist_device); logcall("dist_device()"); t_new(enkai_dist_device()); break;
    case 2: CALL(enkai_dist_init); logcall("dist_init(%d, %d)", (int32_t)world, (int32_t)rank);
        outcome(enkai_dist_init((int32_t)world, (int32_t)rank) != 0); break;
    case 3: {
        static const char *const m[] = {"env://", "tcp://127.0.0.1:1", "file:///nonexistent/dir/store", "udp://x", "tcp://", ""};
        const char *im = chance(90) ? PICK(m) : hostile_string();
        double to = world == 1 ? (chance(80) ? 5.0 : dbl()) : (chance(70) ? 0.05 : (chance(50) ? -1.0 : NAN));
        CALL(enkai_dist_init_method); logcall("dist_init_method(%.30s, %" PRId64 ", %" PRId64 ", %g)", im ? im : "NULL", world, rank, to);
        outcome(enkai_dist_init_method(im, world, rank, to) != 0);
        break;
    }
    case 4: CALL(enkai_dist_rank); logcall("dist_rank()"); outcome(enkai_dist_rank() == -1); break;
    case 5: CALL(enkai_dist_world_size); logcall("dist_world_size()"); outcome(enkai_dist_world_size() == -1); break;
    case 6: CALL(enkai_dist_barrier); logcall("dist_barrier()"); outcome(enkai_dist_barrier() != 0); break;
    case 7: CALL(enkai_dist_allreduce_sum); logcall("allreduce_sum(%.60s)", l ? l : "NULL"); outcome(enkai_dist_allreduce_sum(l) != 0); break;
    case 8: CALL(enkai_dist_allreduce_sum_multi); logcall("allreduce_sum_multi(%.60s)", l ? l : "NULL"); outcome(enkai_dist_allreduce_sum_multi(l) != 0); break;
    case 9: {
        static const char *const ops[] = {"sum", "mean", "max", "min", "prod", ""};
        const char *op = chance(90) ? PICK(ops) : hostile_string();
        CALL(enkai_dist_allreduce); logcall("allreduce(%.60s, %.10s)", l ? l : "NULL", op ? op : "NULL");
        outcome(enkai_dist_allreduce(l, op) != 0);
        break;
    }
    case 10: {
        double mb = chance(80) ? 25.0 : dbl();
        CALL(enkai_dist_allreduce_grads); logcall("allreduce_grads(%.60s, %g)", l ? l : "NULL", mb);
        outcome(enkai_dist_allreduce_grads(l, mb) != 0);
        break;
    }
    case 11: {
        int64_t root = chance(80) ? 0 : int_arg();
        CALL(enkai_dist_broadcast); logcall("broadcast(%.60s, %" PRId64 ")", l ? l : "NULL", root);
        outcome(enkai_dist_broadcast(l, root) != 0);
        break;
    }
    case 12: CALL(enkai_dist_all_gather); logcall("all_gather(%" PRId64 ")", t); t_new(enkai_dist_all_gather(t)); break;
    default: CALL(enkai_dist_shutdown); logcall("dist_shutdown()"); outcome(enkai_dist_shutdown() != 0);
    }
}

/* ---------- driver ---------- */
/* DLPack: exports are deleted or re-imported at once; foreign tensors come
 * from the fuzzer's own producer, each with its own memory (valid for any
 * shape it makes that the library could accept), and must be released exactly
 * once: on a refused import at once, else when the last view of them dies. */
typedef struct {
    DLManagedTensorVersioned m;
    int64_t shape[64], strides[64];
    _Alignas(8) unsigned char data[1024];
} foreign_t;
static long foreign_made, foreign_released;
static void foreign_deleter(DLManagedTensorVersioned *m) {
    foreign_released++;
    free(m); /* m is the first member */
}

static DLManagedTensorVersioned *foreign_tensor(void) {
    static const DLDataType types[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                       {kDLInt, 64, 1},   {kDLInt, 32, 1},   {kDLBool, 8, 1},   {kDLUInt, 8, 1}};
    foreign_t *f = calloc(1, sizeof *f);
    if (!f) abort();
    for (size_t i = 0; i < sizeof f->data; i++) f->data[i] = (unsigned char)(i % 3 == 0); /* valid bools too */
    DLManagedTensorVersioned *m = &f->m;
    m->version.major = chance(92) ? 1 : (uint32_t)PICK(((int[]){0, 2, 3, -1}));
    m->version.minor = (uint32_t)below(4);
    m->deleter = foreign_deleter;
    m->flags = chance(20) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    DLTensor *t = &m->dl_tensor;
    t->dtype = chance(94) ? PICK(types) : (DLDataType){(uint8_t)below(8), (uint8_t)(8 << below(4)), (uint16_t)(chance(50) ? 1 : below(5))};
    int bytes = t->dtype.bits / 8 ? t->dtype.bits / 8 : 1;
    /* At most 3 dims of up to 4 with strides up to 5 (46 elements), or more
     * dims of 1 and 0; or an ndim the library must refuse before reading. */
    int nd = chance(90) ? below(4) : chance(50) ? 4 + below(61) : PICK(((int[]){-1, 65, 1000, INT32_MIN}));
    t->ndim = nd;
    for (int i = 0; i < nd && i < 64; i++) {
        f->shape[i] = nd <= 3 ? below(5) : below(2);
        f->strides[i] = chance(95) ? below(6) : -1 - below(3);
    }
    t->shape = nd > 0 && chance(3) ? NULL : f->shape;
    t->strides = chance(50) ? NULL : f->strides;
    t->data = chance(3) ? NULL : f->data;
    t->byte_offset = chance(90) ? (uint64_t)(below(17) * bytes) : (uint64_t)(1 + below(bytes));
    t->device = chance(90) ? (DLDevice){chance(80) ? kDLCPU : kDLCUDAHost, 0}
                           : (DLDevice){below(20), chance(50) ? 1000 : -1};
    foreign_made++;
    return m;
}

OP(dlpack) {
    switch (below(4)) {
    case 0: {
        int64_t t = tensor();
        CALL(enkai_tensor_to_dlpack); logcall("to_dlpack(%" PRId64 ")", t);
        DLManagedTensorVersioned *m = enkai_tensor_to_dlpack(t);
        outcome(m == NULL);
        if (!m) break;
        if (m->version.major != 1 || !m->deleter) fail("to_dlpack: version %u.%u, deleter %p", m->version.major, m->version.minor, (void *)m->deleter);
        if (enkai_tensor_live_tensors() != baseline[K_TENSOR] + n_live[K_TENSOR] + n_live[K_Q] + 1) fail("to_dlpack: the export is not counted");
        if (chance(50)) {
            logmore(" -> deleted");
            m->deleter(m);
            break;
        }
        CALL(enkai_tensor_from_dlpack); logmore(" -> from_dlpack");
        int64_t h = enkai_tensor_from_dlpack(m);
        outcome(h == 0);
        if (h && enkai_tensor_free(h) != 0) fail("freeing a re-imported export failed");
        break;
    }
    case 1: CALL(enkai_tensor_from_dlpack); logcall("from_dlpack(NULL)"); outcome(enkai_tensor_from_dlpack(NULL) == 0); break;
    default: {
        DLManagedTensorVersioned *m = foreign_tensor();
        DLTensor *t = &m->dl_tensor;
        int read_only = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
        CALL(enkai_tensor_from_dlpack);
        logcall("from_dlpack(v%u, dtype %u/%u/%u, ndim %d, shape %s, strides %s, data %s+%" PRIu64 ", dev %d:%d%s)", m->version.major,
                t->dtype.code, t->dtype.bits, t->dtype.lanes, t->ndim, t->shape ? "set" : "NULL", t->strides ? "set" : "NULL",
                t->data ? "buf" : "NULL", t->byte_offset, t->device.device_type, t->device.device_id, read_only ? ", read-only" : "");
        long before = foreign_released;
        int64_t h = enkai_tensor_from_dlpack(m);
        t_new(h);
        long want = before + (h == 0 || read_only);
        if (foreign_released != want) fail("from_dlpack released the producer's tensor %ld times, not %ld", foreign_released - before, want - before);
    }
    }
}

/* Safetensors files: saves of live tensors into a few paths, opens of them
 * (and of hostile paths), queries and gets on live, stale and invented file
 * handles, and a file-mutation mode: a valid small file with its length
 * prefix, JSON text, offsets or size damaged, opened, and every name it
 * lists got. Nothing may crash, and every handle is in the model. */
static const char st_valid_header[] =
    "{\"__metadata__\":{\"k\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]},\"c\":{\"dtype\":\"BOOL\",\"shape\":[3],"
    "\"data_offsets\":[40,43]},\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[43,43]},"
    "\"h\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[43,45]}}";

static const char *st_path(int for_save) {
    static char p[320];
    static const char *const bad_open[] = {"", "/proc/self/nonexistent/x", "/dev/null", "/proc/self/maps", NULL};
    if (chance(8)) {
        if (!for_save) return PICK(bad_open);
        /* never a device node: the rename would replace it */
        switch (below(3)) {
        case 0: return NULL;
        case 1: return "";
        default: snprintf(p, sizeof p, "%s/no/such/dir.safetensors", ckpt_root); return p;
        }
    }
    if (chance(3)) return ckpt_root; /* a directory */
    snprintf(p, sizeof p, "%s/st%d.safetensors", ckpt_root, below(4));
    return p;
}

/* Names for a live tensor list written by live_tensor_list (distinct, or not). */
static const char *st_names(const char *list) {
    static char b[1024];
    int n;
    int64_t *hs = list_of(list, &n);
    free(hs);
    int dup = chance(5), off = snprintf(b, sizeof b, "[");
    for (int i = 0; i < n; i++) {
        if (chance(2)) off += snprintf(b + off, sizeof b - (size_t)off, "%s\"__metadata__\"", i ? "," : "");
        else off += snprintf(b + off, sizeof b - (size_t)off, "%s\"t%d\"", i ? "," : "", dup ? 0 : i);
    }
    snprintf(b + off, sizeof b - (size_t)off, "]");
    return b;
}

static void st_get(int64_t f, const char *name) {
    int64_t dev = chance(90) ? cpu : handle(K_DEVICE);
    CALL(enkai_safetensors_get); logcall("st_get(%" PRId64 ", %.40s, %" PRId64 ")", f, name ? name : "NULL", dev);
    t_new(enkai_safetensors_get(f, name, dev));
}

/* Gets every name a file lists (names with escapes are taken as they stand). */
static void st_get_all(int64_t f) {
    char *out = NULL;
    size_t n = 0;
    CALL(enkai_safetensors_names); logcall("st_names(%" PRId64 ")", f);
    int r = enkai_safetensors_names(f, &out, &n);
    outcome(r != 0);
    if (r != 0) return;
    for (char *p = strchr(out, '"'); p; p = strchr(p, '"')) {
        char *end = strchr(p + 1, '"');
        if (!end) break;
        *end = 0;
        st_get(f, p + 1);
        p = end + 1;
    }
    enkai_tensor_string_free(out);
    /* Then all of them in one call, the count first. It draws nothing from
     * the generator and its tensors are freed at once, so the run's other
     * calls stay as they were. */
    CALL(enkai_safetensors_get_all); logcall("st_get_all(%" PRId64 ", count)", f);
    int64_t count = enkai_safetensors_get_all(f, cpu, NULL, 0, NULL, NULL), hs[64];
    outcome(count < 0);
    if (count < 0 || count > 64) return;
    char *names = NULL;
    logcall("st_get_all(%" PRId64 ", cap %" PRId64 ")", f, count);
    int64_t got = enkai_safetensors_get_all(f, cpu, hs, (size_t)count, &names, &n);
    outcome(got < 0);
    if (got < 0) return;
    if (got != count || !names || strlen(names) != n) fail("%s: %" PRId64 " tensors after a count of %" PRId64 ", or bad names", current, got, count);
    for (int64_t i = 0; i < got; i++)
        if (enkai_tensor_free(hs[i])) fail("%s: freeing a tensor it made failed", current);
    enkai_tensor_string_free(names);
}

static void st_open(const char *path) {
    CALL(enkai_safetensors_open); logcall("st_open(%.80s)", path ? path : "NULL");
    t_new(enkai_safetensors_open(path));
}

/* Writes the valid file, damaged, and opens it; then gets every name. */
static void st_mutated(void) {
    static unsigned char file[512];
    size_t hn = strlen(st_valid_header), padded = (hn + 7) / 8 * 8, len = 8 + padded + 45;
    uint64_t n = padded;
    memcpy(file + 8, st_valid_header, hn);
    memset(file + 8 + hn, ' ', padded - hn);
    for (int i = 0; i < 45; i++) file[8 + padded + i] = (unsigned char)(i >= 40 && i < 43 ? i % 2 : i * 37);
    for (int m = below(3) + 1; m > 0; m--) {
        switch (below(6)) {
        case 0: {
            static const uint64_t lens[] = {0, 1, 7, 8, 100000000, 100000001, 1ULL << 62, UINT64_MAX};
            n = chance(50) ? PICK(lens) : n + (uint64_t)(below(17) - 8);
            break;
        }
        case 1:
        case 2: { /* the JSON text */
            static const char chars[] = "{}[],:\" 0123456789-eE.\\\xff";
            file[8 + below((int)padded)] = (unsigned char)chars[below((int)sizeof chars - 1)];
            break;
        }
        case 3: { /* a digit of the offsets or shapes */
            char *d = strstr((char *)file + 8, chance(50) ? "data_offsets" : "shape");
            if (d && d < (char *)file + 8 + padded - 20) d[15 + below(6)] = (char)('0' + below(10));
            break;
        }
        case 4: len = (size_t)below((int)len + 1); break; /* truncated */
        default: file[8 + padded + below(45)] ^= (unsigned char)(1 << below(8)); /* the data: a bool may become 2 */
        }
    }
    memcpy(file, &n, 8); /* little-endian hosts */
    /* Written beside and renamed over: tensors got from the previous file map
     * it, and truncating a mapped file in place would fault at their next touch. */
    char path[320], tmp[330];
    snprintf(path, sizeof path, "%s/mutated.safetensors", ckpt_root);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(file, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) fail("cannot write %s", path);
    CALL(enkai_safetensors_open); logcall("st_open(mutated, n %" PRIu64 ", len %zu)", n, len);
    int64_t h = enkai_safetensors_open(path);
    t_new(h);
    if (!h) return;
    st_get_all(h);
    if (chance(50)) {
        CALL(enkai_safetensors_free); logcall("st_free(%" PRId64 ")", h);
        int r = enkai_safetensors_free(h);
        outcome(r != 0);
        if (r == 0) model_free(h);
    }
}

OP(safetensors) {
    static const char *const names[] = {"a", "b", "c", "e", "h", "t0", "t1", "__metadata__", "", "zz"};
    int64_t f = handle(K_ST);
    char *out = NULL;
    size_t len = 0;
    int r;
    switch (below(9)) {
    case 0: {
        const char *path = st_path(1), *l = chance(85) ? live_tensor_list(0) : handle_list(0, K_TENSOR);
        const char *nm = l == list_buf[0] && chance(90) ? st_names(l) : hostile_string();
        const char *meta = chance(50) ? NULL : (chance(80) ? "{\"format\":\"pt\"}" : hostile_string());
        if (chance(50)) {
            CALL(enkai_safetensors_save); logcall("st_save(%.60s, %.60s, %.60s, %.20s)", path ? path : "NULL", nm ? nm : "NULL", l ? l : "NULL", meta ? meta : "NULL");
            r = enkai_safetensors_save(path, nm, l, meta);
        } else {
            CALL(enkai_state_dict_save); logcall("state_dict_save(%.60s, %.60s, %.60s)", path ? path : "NULL", nm ? nm : "NULL", l ? l : "NULL");
            r = enkai_state_dict_save(path, nm, l, meta);
        }
        outcome(r != 0);
        return;
    }
    case 1: st_open(st_path(0)); return;
    case 2: st_mutated(); return;
    case 3: st_get(f, chance(95) ? PICK(names) : hostile_string()); return;
    case 4: if (f && find_live(f) >= 0) st_get_all(f); return;
    case 5: {
        const char *nm = chance(95) ? PICK(names) : hostile_string();
        CALL(enkai_safetensors_info); logcall("st_info(%" PRId64 ", %.40s)", f, nm ? nm : "NULL");
        r = enkai_safetensors_info(f, nm, MAYBE_NULL(&out), MAYBE_NULL(&len));
        break;
    }
    case 6:
        CALL(enkai_safetensors_metadata); logcall("st_metadata(%" PRId64 ")", f);
        r = enkai_safetensors_metadata(f, MAYBE_NULL(&out), MAYBE_NULL(&len));
        break;
    case 7:
        CALL(enkai_safetensors_names); logcall("st_names(%" PRId64 ")", f);
        r = enkai_safetensors_names(f, MAYBE_NULL(&out), MAYBE_NULL(&len));
        break;
    default:
        CALL(enkai_safetensors_free); logcall("st_free(%" PRId64 ")", f);
        r = enkai_safetensors_free(f);
        outcome(r != 0);
        if (r == 0) model_free(f);
        return;
    }
    outcome(r != 0);
    if (r == 0) {
        if (!out || strlen(out) != len) fail("%s: output of %zu bytes is not its stated length", current, len);
        enkai_tensor_string_free(out);
    }
}

typedef struct {
    void (*fn)(void);
    int weight;
} op_t;

/* The op table's generic entry: names and parameter names come from
 * enkai_op_schema() (read once), so the fuzzer's list grows with the table. */
#define MAX_SCHEMA_NAMES 2048
static char *schema_text;
static const char *op_names[MAX_SCHEMA_NAMES], *param_names[MAX_SCHEMA_NAMES];
static int n_op_names, n_param_names;

/* Splits the schema's `"name":"..."` values, in place, into op names (an
 * entry's name is followed by its "overload") and parameter names. */
static void load_schema(void) {
    EnkaiSlice s = enkai_op_schema();
    if (!s.ptr) fail("enkai_op_schema failed: %s", enkai_tensor_last_error());
    schema_text = malloc(s.len + 1);
    memcpy(schema_text, s.ptr, s.len + 1);
    enkai_free(s.ptr, s.len);
    const char *key = "\"name\":\"";
    for (char *p = strstr(schema_text, key); p; p = strstr(p, key)) {
        p += strlen(key);
        char *end = strchr(p, '"');
        if (!end) break;
        int is_op = strncmp(end, "\",\"overload\"", 12) == 0;
        *end = 0;
        if (is_op && n_op_names < MAX_SCHEMA_NAMES && (n_op_names == 0 || strcmp(op_names[n_op_names - 1], p) != 0))
            op_names[n_op_names++] = p;
        else if (!is_op && n_param_names < MAX_SCHEMA_NAMES)
            param_names[n_param_names++] = p;
        p = end + 1;
    }
    if (n_op_names == 0 || n_param_names == 0) fail("enkai_op_schema lists no op or no parameter");
}

static const char *op_kwargs(void) {
    static char buf[4][256];
    static int which;
    char *b = buf[which++ & 3];
    static const char *const values[] = {"1", "-1", "0", "2.5", "true", "false", "null", "[0]", "[-1, 0]", "\"tanh\"",
                                         "\"fp32\"", "\"none\"", "-Infinity", "NaN", "1e308", "[]", "{}", "\"\"",
                                         "\"ij,jk\"", "\"...ii->...\"", "\"i,i,i->\"", "\"a,b->ab\"", "[0, 1, 0, 1]"};
    switch (below(6)) {
    case 0: return NULL;
    case 1: return "{}";
    case 2: return hostile_string();
    default: {
        int n = below(3) + 1, off = snprintf(b, 256, "{");
        for (int i = 0; i < n && n_param_names; i++)
            off += snprintf(b + off, (size_t)(256 - off), "%s\"%s\": %s", i ? ", " : "",
                            chance(90) ? param_names[below(n_param_names)] : "bogus", PICK(values));
        snprintf(b + off, (size_t)(256 - off), "}");
        return b;
    }
    }
}

OP(onnx) {
    static const char *const names[] = {"{}", "{\"w\": %s}", "[]", "{\"w\": 1}", "{\"\": 5}"};
    int r;
    switch (below(5)) {
    case 0: CALL(enkai_onnx_trace_begin); logcall("onnx_trace_begin()"); r = enkai_onnx_trace_begin(); break;
    case 1: CALL(enkai_onnx_trace_end); logcall("onnx_trace_end()"); r = enkai_onnx_trace_end(); break;
    case 2: CALL(enkai_onnx_trace_clear); logcall("onnx_trace_clear()"); r = enkai_onnx_trace_clear(); break;
    default: {
        static char path[320], nm[160], outs[160];
        snprintf(path, sizeof path, "%s/m%d.onnx", ckpt_root, below(2));
        const char *ins = chance(85) ? live_tensor_list(0) : handle_list(0, K_TENSOR);
        int64_t y = tensor();
        if (chance(70)) snprintf(outs, sizeof outs, "[%" PRId64 "]", y);
        else snprintf(outs, sizeof outs, "[{\"handle\": %" PRId64 ", \"name\": \"y\", \"batch_dim\": %d}]", y, below(3) - 1);
        int k = below(5);
        if (k == 1) snprintf(nm, sizeof nm, names[1], "2");
        else snprintf(nm, sizeof nm, "%s", names[k]);
        const char *p = chance(95) ? path : NULL, *o = chance(95) ? outs : hostile_string(), *n = chance(95) ? nm : hostile_string();
        int64_t opset = chance(85) ? 17 + below(7) : below(40) - 5;
        CALL(enkai_onnx_export); logcall("onnx_export(%.60s, %.60s, %.60s, %.40s, %" PRId64 ")", p ? p : "NULL", ins ? ins : "NULL", o ? o : "NULL", n ? n : "NULL", opset);
        r = enkai_onnx_export(p, ins, o, n, opset);
    }
    }
    outcome(r != 0);
}

OP(generic) {
    if (chance(3)) {
        static const char *const eqs[] = {"ij,jk->ik", "ii", "...ij,...jk", "i,i,i,i->i", "ab,bc,cd,de->ae", "i.j", "ij->ii", ""};
        static const char *const shapes[] = {"[[2,3],[3,4]]", "[[3,3]]", "[[2,3],[3,4],[4,5],[5,6]]", "[[2**40]]", "[]",
                                             "[[-1]]", "[[4],[4],[4],[4]]", "[[1,2],[2,3],[3,4],[4,5]]", "[[3000000000,3000000000],[3000000000,3000000000]]"};
        const char *eq = chance(80) ? PICK(eqs) : hostile_string();
        const char *sh = chance(80) ? PICK(shapes) : hostile_string();
        char *text = NULL;
        size_t len = 0;
        CALL(enkai_einsum_path); logcall("einsum_path(%.40s, %.60s)", eq ? eq : "NULL", sh ? sh : "NULL");
        int r = enkai_einsum_path(eq, sh, chance(95) ? &text : NULL, chance(95) ? &len : NULL);
        outcome(r != 0);
        if (r == 0) enkai_tensor_string_free(text);
        return;
    }
    if (chance(3)) {
        CALL(enkai_op_schema); logcall("op_schema()");
        EnkaiSlice s = enkai_op_schema();
        outcome(s.ptr == NULL);
        if (s.ptr) enkai_free(s.ptr, s.len);
        return;
    }
    const char *name = chance(95) && n_op_names ? op_names[below(n_op_names)] : hostile_string();
    int64_t in[4], out[8];
    int n = below(5);
    for (int i = 0; i < n; i++) in[i] = chance(90) ? tensor() : 0;
    const char *kw = op_kwargs();
    size_t cap = chance(90) ? 8 : (size_t)below(2);
    CALL(enkai_op); logcall("op(%.30s, %d inputs, %.80s, cap %zu)", name ? name : "NULL", n, kw ? kw : "NULL", cap);
    int64_t r = enkai_op(name, chance(98) ? in : NULL, (size_t)n, kw, chance(98) ? out : NULL, cap);
    outcome(r < 0);
    for (int64_t i = 0; i < r; i++) model_new(out[i]);
}

/* A checkpointed span whose function behaves as its context says: a real
 * op, a forged output handle, a failure, too many outputs. The release must
 * run once for every call that passed one: before a failing call returns,
 * or when the outputs' graph goes. */
static long span_released;
static int64_t span_fn(void *ctx, const int64_t *in, size_t n, int64_t *out, size_t cap) {
    switch ((intptr_t)ctx) {
    case 0:
        if (n == 0 || cap == 0) return 0;
        out[0] = enkai_tensor_tanh(in[0]);
        return out[0] ? 1 : -1;
    case 1:
        if (cap) out[0] = INT64_C(0x7fffffffffff);
        return cap ? 1 : 0;
    case 2: return -1;
    default: return (int64_t)cap + 1;
    }
}
static void span_release(void *ctx) {
    (void)ctx;
    span_released++;
}

OP(grad_checkpoint) {
    int64_t in[3], out[4];
    int n = below(4);
    for (int i = 0; i < n; i++) in[i] = tensor();
    size_t cap = chance(90) ? 4 : (size_t)below(2);
    intptr_t mode = chance(70) ? 0 : below(4);
    int with_release = chance(90);
    long before = span_released;
    CALL(enkai_grad_checkpoint); logcall("grad_checkpoint(mode %d, %d inputs, cap %zu)", (int)mode, n, cap);
    int64_t r = enkai_grad_checkpoint(chance(97) ? span_fn : NULL, with_release ? span_release : NULL, (void *)mode,
                                      chance(98) ? in : NULL, (size_t)n, chance(98) ? out : NULL, cap);
    outcome(r < 0);
    if (r < 0 && with_release && span_released != before + 1) fail("a failed grad_checkpoint did not release its span once");
    for (int64_t i = 0; i < r; i++) model_new(out[i]);
    if (r > 0 && chance(50)) {
        int64_t s = enkai_tensor_sum(out[0], -1, 0);
        if (s) {
            model_new(s);
            (void)enkai_tensor_backward(s);
        }
    }
}

static const op_t ops[] = {
    {op_create, 14}, {op_from_data, 4}, {op_ids_u32, 2}, {op_device, 2}, {op_retain_free, 18}, {op_binary, 10},
    {op_unary, 10}, {op_layout, 9}, {op_nn, 6}, {op_data_out, 6}, {op_autograd, 8}, {op_optim, 5}, {op_amp, 4},
    {op_backend, 1}, {op_library, 2}, {op_generic, 12}, {op_lm, 2}, {op_checkpoint, 1}, {op_dist, 2}, {op_dlpack, 3},
    {op_safetensors, 4}, {op_grad_checkpoint, 3}, {op_quant, 4}, {op_onnx, 2},
};

#define SLOW_S 10.0
#define RSS_CALL_BOUND_KB (2L << 20)
static long rss_setup;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_kb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Releases every reference the model holds, checking each free succeeds. */
static void release_all(void) {
    for (int k = 0; k < K_N; k++)
        while (n_live[k]) {
            int64_t h = live[k][n_live[k] - 1].h;
            current = "release_all";
            logcall("release_all %s %" PRId64, kind_names[k], h);
            if (release_of[k](h) != 0) fail("freeing live %s %" PRId64 " failed", kind_names[k], h);
            model_free(h);
        }
}

static void rm_rf(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", path);
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 200000;
    seed = argc > 2 ? strtoull(argv[2], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_state = seed ? seed : 1;
    printf("fuzz: %ld calls, seed %" PRIu64 " (replay: fuzz %ld %" PRIu64 ")\n", calls, seed, calls, seed);
    fflush(stdout);

    /* No launcher environment: a multi-rank init must fail fast, not wait for peers. */
    const char *env[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ENKAI_DIST_INIT_METHOD",
                         "TORCHELASTIC_USE_AGENT_STORE", "ENKAI_BACKEND"};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) unsetenv(env[i]);
    setenv("ENKAI_DIST_TIMEOUT_S", "0.05", 1);
    load_schema();

    snprintf(ckpt_root, sizeof ckpt_root, "/tmp/enkai-fuzz-XXXXXX");
    if (!mkdtemp(ckpt_root)) return perror("mkdtemp"), 2;

    /* 100k '[' (deep nesting), a 1 MiB number, and a 1 MiB handle list. */
    deep_json = malloc(100001);
    memset(deep_json, '[', 100000);
    deep_json[100000] = 0;
    huge_json = malloc(1 << 20);
    huge_json[0] = '[';
    memset(huge_json + 1, '7', (1 << 20) - 3);
    huge_json[(1 << 20) - 2] = ']';
    huge_json[(1 << 20) - 1] = 0;
    huge_list = malloc(1 << 20);
    {
        size_t off = 0;
        huge_list[off++] = '[';
        while (off < (1 << 20) - 32) off += (size_t)sprintf(huge_list + off, "%s281474976710656", off > 1 ? "," : "");
        strcpy(huge_list + off, "]");
    }
    for (size_t i = 0; i < sizeof data_buf; i++) data_buf[i] = (unsigned char)(i * 7 % 2); /* valid bools too */
    for (int i = 0; i < 64; i++) ids[i] = (uint32_t)(i % 16);

    /* One CPU device the fuzzer relies on, outside the model (the calls only
     * reach it through an invented number, which is vanishingly unlikely). */
    cpu = enkai_tensor_device("cpu");
    if (cpu == 0) return fprintf(stderr, "fuzz: no CPU device: %s\n", enkai_tensor_last_error()), 2;
    for (int k = 0; k < K_N; k++) baseline[k] = live_counter[k]();

    int total_weight = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) total_weight += ops[i].weight;

    long rss_start = 0;
    rss_setup = rss_kb();
    time_t t0 = time(NULL);
    for (call_no = 0; call_no < calls; call_no++) {
        if (call_no == calls / 10) rss_start = rss_kb();
        /* Keep the pools from growing without bound: free more when they are large. */
        if (n_live[K_TENSOR] > 400 || n_live[K_OPT] > 40 || n_live[K_SCALER] > 40 || n_live[K_DEVICE] > 40 ||
            n_live[K_ST] > 40) {
            for (int k = 0; k < K_N; k++)
                while (n_live[k] > (k == K_TENSOR ? 200 : 20)) {
                    int i = below(n_live[k]);
                    int64_t h = live[k][i].h;
                    current = "trim";
                    logcall("trim %s %" PRId64, kind_names[k], h);
                    outcome(release_of[k](h) != 0);
                    model_free(h);
                }
        }
        int r = below(total_weight);
        size_t i = 0;
        while (r >= ops[i].weight) r -= ops[i++].weight;
        double started = now_s();
        ops[i].fn();
        /* No call may take long: every wait in the library is bounded, and the
         * fuzzer's multi-rank calls have no peers and a short timeout. */
        if (now_s() - started > SLOW_S) fail("%s took %.1f s", current, now_s() - started);
        check_counters();
        /* No call may leave the process holding gigabytes (caught here, not by the OOM killer). */
        if (rss_kb() - rss_setup > RSS_CALL_BOUND_KB)
            fail("RSS grew from %ld to %ld KiB", rss_setup, rss_kb());
    }
    long rss_end = rss_kb();

    /* Leave no scope open, then free everything. */
    while (enkai_autocast_exit() == 0) {
    }
    enkai_dist_shutdown();
    free(params_of_tinylm);
    release_all();
    current = "end";
    check_counters();
    for (int k = 0; k < K_N; k++)
        if (live_counter[k]() != baseline[k]) fail("%s counter did not return to baseline", kind_names[k]);
    if (foreign_released != foreign_made)
        fail("%ld DLPack tensors were imported, %ld released by their deleter", foreign_made, foreign_released);
    rm_rf(ckpt_root);
    enkai_tensor_device_free(cpu);

    printf("fuzz: %ld calls in %lds, counters back to baseline; RSS %ld -> %ld KiB\n", calls, (long)(time(NULL) - t0),
           rss_start, rss_end);
    printf("fuzz: failures by code:");
    for (int c = 1; c < N_CODES; c++)
        if (failures_by_code[c]) printf(" %s=%ld", code_names[c], failures_by_code[c]);
    printf("\n");
    /* Memory stays bounded: what is left after the warm-up is caches, not a
     * leak per call (ASan's quarantine holds up to 256 MiB of freed memory). */
#ifdef __SANITIZE_ADDRESS__
    const long rss_bound_kb = 768 * 1024;
#else
    const long rss_bound_kb = 256 * 1024;
#endif
    if (rss_start && rss_end - rss_start > rss_bound_kb) {
        fprintf(stderr, "fuzz: RSS grew by %ld KiB after the warm-up\n", rss_end - rss_start);
        return 1;
    }
    free(deep_json);
    free(huge_json);
    free(huge_list);
    printf("capi-fuzz: %ld passed, 0 failed\n", calls);
    return 0;
}
