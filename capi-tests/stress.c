/* Thread stress of the C ABI: N threads (default 8) each run M (default
 * 100,000) mixed operations on a shared table of tensor and device handles —
 * create, retain, free, double free, use after free, wrong-kind handles, ops,
 * backward — and periodically train a distinct TinyLM of their own with AdamW.
 *
 * Ownership is exact, so every call has one expected outcome:
 *  - the table owns one reference per entry; a thread "pins" an entry under
 *    the table mutex (never held across a library call) and may use it until
 *    it unpins; an entry taken out of the table is freed by whoever drops the
 *    last pin, so every pinned use must succeed;
 *  - "racy" uses read a handle from the table and use it with no pin: they
 *    must succeed or fail with E_HANDLE_STALE (the entry was freed meanwhile),
 *    nothing else; a racy retain that succeeds owns a reference;
 *  - handles whose last reference the test dropped go to a shared graveyard:
 *    any thread's later free / retain / use of them must be E_HANDLE_STALE;
 *  - every failure must carry "E_NAME: detail" for the expected code.
 * Every reference (created or retained) is counted and every successful free
 * counted, per kind; at the end the two balance and the live counters return
 * to their values before the threads started. Each model's first loss must
 * equal the one main computed alone, before the threads, from the same seed
 * (tinylm_init's weights depend on its seed only). A SIGALRM watchdog bounds
 * the run (deadlock or too slow: exit 2).
 *
 * Binary ops go through the typed functions and, half the time, through
 * `enkai_op` by name (its per-thread parse cache under 8 threads).
 *
 * Usage: stress [threads] [ops_per_thread] [seed] [timeout_s] */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "check.h"

enum { K_TENSOR, K_DEVICE, K_OPT, K_SCALER, NKINDS };
static const char *KIND_NAME[NKINDS] = {"tensors", "devices", "optimizers", "scalers"};

enum { DT_F32, DT_F64, DT_F16, DT_BF16, DT_I32, NDT };
static const char *DT_NAME[NDT] = {"fp32", "fp64", "fp16", "bf16", "int32"};
static const size_t DT_SIZE[NDT] = {4, 8, 2, 2, 4};

#define CODE_NAME enkai_code_names
#define NCODES ENKAI_N_CODES

/* ---- shapes ---------------------------------------------------------------- */

typedef struct {
    int nd;
    int64_t d[3];
} Shape;

/* At most 64 elements each; chosen so that some pairs broadcast / matmul and some do not. */
static const Shape SHAPES[] = {
    {0, {0}}, {1, {1}}, {1, {4}}, {1, {3}}, {2, {4, 4}}, {2, {4, 1}}, {3, {2, 4, 4}}, {2, {8, 8}},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

static int64_t numel_of(const Shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->nd; i++) n *= s->d[i];
    return n;
}

static void shape_json(const Shape *s, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->nd; i++) o += (size_t)snprintf(buf + o, cap - o, i ? ",%" PRId64 : "%" PRId64, s->d[i]);
    snprintf(buf + o, cap - o, "]");
}

/* NumPy broadcasting; 0 when the shapes do not fit. */
static int broadcast(const Shape *a, const Shape *b, Shape *out) {
    int n = a->nd > b->nd ? a->nd : b->nd;
    Shape o = {n, {0}};
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->nd), ib = i - (n - b->nd);
        int64_t x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
        if (x == y || y == 1) o.d[i] = x;
        else if (x == 1) o.d[i] = y;
        else return 0;
    }
    *out = o;
    return 1;
}

/* torch.matmul's shape rule; 0 when the shapes do not fit, else the result and the inner size. */
static int matmul_expect(const Shape *a, const Shape *b, Shape *out, int64_t *k) {
    if (a->nd == 0 || b->nd == 0) return 0;
    int64_t ka = a->d[a->nd - 1], kb = b->nd == 1 ? b->d[0] : b->d[b->nd - 2];
    if (ka != kb) return 0;
    *k = ka;
    Shape o = {0, {0}};
    if (a->nd == 1 && b->nd == 1) {
        /* scalar */
    } else if (b->nd == 1) {
        o.nd = a->nd - 1;
        for (int i = 0; i < o.nd; i++) o.d[i] = a->d[i];
    } else if (a->nd == 1) {
        o.nd = b->nd - 1;
        for (int i = 0; i < b->nd - 2; i++) o.d[i] = b->d[i];
        o.d[o.nd - 1] = b->d[b->nd - 1];
    } else {
        Shape ba = {a->nd - 2, {a->d[0], 0, 0}}, bb = {b->nd - 2, {b->d[0], 0, 0}}, bo;
        if (!broadcast(&ba, &bb, &bo)) return 0;
        o = bo;
        o.d[o.nd++] = a->d[a->nd - 2];
        o.d[o.nd++] = b->d[b->nd - 1];
    }
    *out = o;
    return 1;
}

/* ---- per-thread state and checks ------------------------------------------- */

typedef struct {
    int id;
    uint64_t rng;
    long ops, fails;
    long created[NKINDS], retained[NKINDS], freed[NKINDS]; /* references taken / dropped */
    long racy_ok, racy_stale, stale_checked, kind_checked, trains, seed_mismatch;
    double secs;
} Thread;

static void tfail(Thread *T, int line, const char *what) {
    T->fails++;
    if (T->fails <= 10) {
        const char *le = enkai_tensor_last_error();
        fprintf(stderr, "stress.c:%d: [thread %d, op %ld] CHECK(%s) failed (last error: %s)\n", line, T->id, T->ops,
                what, le ? le : "none");
    }
}
#define TCHECK_AT(T, line, cond)                 \
    do {                                         \
        if (!(cond)) tfail((T), (line), #cond);  \
    } while (0)
#define TCHECK(T, cond) TCHECK_AT(T, __LINE__, cond)

/* The last call succeeded. */
static int ok_now(void) { return enkai_tensor_last_error() == NULL && enkai_tensor_last_error_code() == E_OK; }

/* The last call failed with `code`, and its message is "E_NAME: detail". */
static int err_is(int code) {
    const char *le = enkai_tensor_last_error();
    if (enkai_tensor_last_error_code() != code || code <= 0 || code >= NCODES || le == NULL) return 0;
    size_t n = strlen(CODE_NAME[code]);
    return strncmp(le, CODE_NAME[code], n) == 0 && le[n] == ':' && le[n + 1] == ' ' && le[n + 2] != '\0';
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t rnd(Thread *T) { /* xorshift64* */
    T->rng ^= T->rng >> 12;
    T->rng ^= T->rng << 25;
    T->rng ^= T->rng >> 27;
    return (uint32_t)((T->rng * 0x2545F4914F6CDD1Dull) >> 32);
}

/* Frees one reference of `h` of `kind`; returns the call's result. */
static int free_kind(int kind, int64_t h) {
    switch (kind) {
    case K_TENSOR: return enkai_tensor_free(h);
    case K_DEVICE: return enkai_tensor_device_free(h);
    case K_OPT: return enkai_tensor_opt_free(h);
    default: return enkai_amp_scaler_free(h);
    }
}

static int retain_kind(int kind, int64_t h) {
    switch (kind) {
    case K_TENSOR: return enkai_tensor_retain(h);
    case K_DEVICE: return enkai_tensor_device_retain(h);
    case K_OPT: return enkai_opt_retain(h);
    default: return enkai_amp_scaler_retain(h);
    }
}

/* Frees a reference the caller owns: must succeed. */
static void drop_ref(Thread *T, int line, int kind, int64_t h) {
    int rc = free_kind(kind, h);
    TCHECK_AT(T, line, rc == 0 && ok_now());
    if (rc == 0) T->freed[kind]++;
}

/* ---- the graveyard: handles whose last reference is known to be gone ------ */

#define GRAVE 256
static struct {
    int64_t h;
    int kind;
} grave[GRAVE];
static int grave_n, grave_pos;
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;

static void bury(int kind, int64_t h) {
    pthread_mutex_lock(&grave_mu);
    grave[grave_pos].h = h;
    grave[grave_pos].kind = kind;
    grave_pos = (grave_pos + 1) % GRAVE;
    if (grave_n < GRAVE) grave_n++;
    pthread_mutex_unlock(&grave_mu);
}

/* Frees the last reference of a private handle, then checks it is stale and buries it. */
static void drop_last(Thread *T, int line, int kind, int64_t h) {
    drop_ref(T, line, kind, h);
    TCHECK_AT(T, line, free_kind(kind, h) == 1 && err_is(E_HANDLE_STALE));
    bury(kind, h);
}

/* ---- the shared table ------------------------------------------------------- */

typedef struct Entry {
    int64_t h;
    int kind; /* K_TENSOR or K_DEVICE */
    Shape s;  /* tensors: shape, dtype and the value of every element */
    int dt;
    double v;
    int pins, removed; /* under table_mu */
} Entry;

#define SLOTS 64
static Entry *table[SLOTS];
static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t main_dev; /* owned by main for the whole run */

/* Frees the table's reference of an entry nobody pins any more. */
static void retire(Thread *T, Entry *e) {
    drop_ref(T, __LINE__, e->kind, e->h);
    free(e);
}

/* Pins a random entry (of `kind`, or any when < 0); NULL when none found. */
static Entry *pin(Thread *T, int kind) {
    Entry *e = NULL;
    pthread_mutex_lock(&table_mu);
    for (int tries = 0; tries < 8 && !e; tries++) {
        Entry *c = table[rnd(T) % SLOTS];
        if (c && (kind < 0 || c->kind == kind)) {
            c->pins++;
            e = c;
        }
    }
    pthread_mutex_unlock(&table_mu);
    return e;
}

static void unpin(Thread *T, Entry *e) {
    pthread_mutex_lock(&table_mu);
    int last = --e->pins == 0 && e->removed;
    pthread_mutex_unlock(&table_mu);
    if (last) retire(T, e);
}

/* Takes slot `i` out of the table (caller holds the lock); returns the entry to retire, if any. */
static Entry *take_locked(int i) {
    Entry *old = table[i];
    table[i] = NULL;
    if (!old) return NULL;
    old->removed = 1;
    return old->pins == 0 ? old : NULL;
}

/* Puts a new entry (owning one reference) in a random slot, evicting its occupant. */
static void table_put(Thread *T, Entry *e) {
    pthread_mutex_lock(&table_mu);
    int i = (int)(rnd(T) % SLOTS);
    Entry *old = take_locked(i);
    table[i] = e;
    pthread_mutex_unlock(&table_mu);
    if (old) retire(T, old);
}

static void table_remove(Thread *T) {
    pthread_mutex_lock(&table_mu);
    Entry *old = take_locked((int)(rnd(T) % SLOTS));
    pthread_mutex_unlock(&table_mu);
    if (old) retire(T, old);
}

/* A copy of a random entry, with no pin: its handle may be freed at any moment. */
static int peek(Thread *T, Entry *out) {
    int found = 0;
    pthread_mutex_lock(&table_mu);
    Entry *c = table[rnd(T) % SLOTS];
    if (c) {
        *out = *c;
        found = 1;
    }
    pthread_mutex_unlock(&table_mu);
    return found;
}

/* ---- checking a tensor's contents ------------------------------------------- */

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double load_elem(const unsigned char *p, int dt) {
    switch (dt) {
    case DT_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case DT_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case DT_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return half_to_double(h);
    }
    case DT_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: {
        int32_t i;
        memcpy(&i, p, 4);
        return i;
    }
    }
}

/* The shape JSON `sl` holds exactly the dims of `s`. */
static int shape_matches(EnkaiSlice sl, const Shape *s) {
    if (!sl.ptr || sl.len < 2 || sl.ptr[0] != '[' || sl.ptr[sl.len - 1] != ']') return 0;
    const char *p = (const char *)sl.ptr + 1;
    int n = 0;
    while (*p && *p != ']') {
        if (*p >= '0' && *p <= '9') {
            char *end;
            long long d = strtoll(p, &end, 10);
            if (n >= s->nd || d != s->d[n]) return 0;
            n++;
            p = end;
        } else {
            p++;
        }
    }
    return n == s->nd;
}

#define MAXBYTES (64 * 8)

/* Full check of a tensor the caller holds (or pins) a reference on: numel,
 * shape, dtype, and every element equal to `v` through copy_to. */
static void check_tensor(Thread *T, int line, int64_t h, const Shape *s, int dt, double v) {
    int64_t n = enkai_tensor_numel(h);
    TCHECK_AT(T, line, n == numel_of(s) && ok_now());
    EnkaiSlice sl = enkai_tensor_shape(h);
    TCHECK_AT(T, line, sl.ptr != NULL && ok_now() && shape_matches(sl, s));
    enkai_free(sl.ptr, sl.len);
    char *name = NULL;
    size_t name_len = 0;
    int rc = enkai_tensor_dtype(h, &name, &name_len);
    TCHECK_AT(T, line, rc == 0 && ok_now() && name && strcmp(name, DT_NAME[dt]) == 0 && name_len == strlen(name));
    enkai_tensor_string_free(name);
    if (n != numel_of(s)) return;
    unsigned char buf[MAXBYTES + 1];
    size_t nb = (size_t)n * DT_SIZE[dt];
    memset(buf, 0x5a, sizeof buf);
    rc = enkai_tensor_copy_to(h, buf, nb);
    TCHECK_AT(T, line, rc == 0 && ok_now() && buf[nb] == 0x5a);
    if (rc != 0) return;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += load_elem(buf + (size_t)i * DT_SIZE[dt], dt) != v;
    TCHECK_AT(T, line, bad == 0);
}

/* A new result `r` of an op that must succeed: check it, then free it (last reference). */
static void check_result(Thread *T, int line, int64_t r, const Shape *s, int dt, double v) {
    TCHECK_AT(T, line, r > 0 && ok_now());
    if (r <= 0) return;
    T->created[K_TENSOR]++;
    check_tensor(T, line, r, s, dt, v);
    drop_ref(T, line, K_TENSOR, r);
    if (rnd(T) % 8 == 0) bury(K_TENSOR, r);
}

/* ---- operations ---------------------------------------------------------------- */

/* Errors that libtorch itself raises (a C++ exception with its backtrace) cost
 * milliseconds, library-side checks well under a microsecond: the calls that
 * must fail inside libtorch run on a 1/RARE draw, so that 800k operations
 * stay within seconds. */
#define RARE 64
static int rare(Thread *T) { return rnd(T) % RARE == 0; }

static void op_create_tensor(Thread *T) {
    Shape s = SHAPES[rnd(T) % NSHAPES];
    int dt = rnd(T) % 4 == 0 ? DT_F64 : DT_F32;
    double v = (double)((int)(rnd(T) % 9) - 4);
    char js[32];
    shape_json(&s, js, sizeof js);
    Entry *d = pin(T, K_DEVICE);
    int64_t dev = d ? d->h : main_dev, h;
    int how = (int)(rnd(T) % 4);
    if (how == 0) {
        v = 0;
        h = enkai_tensor_zeros(js, DT_NAME[dt], dev);
    } else if (how == 1) {
        v = 1;
        h = enkai_tensor_ones(js, DT_NAME[dt], dev);
    } else if (how == 2) {
        unsigned char buf[MAXBYTES];
        int64_t n = numel_of(&s);
        for (int64_t i = 0; i < n; i++) {
            if (dt == DT_F32) {
                float f = (float)v;
                memcpy(buf + i * 4, &f, 4);
            } else {
                memcpy(buf + i * 8, &v, 8);
            }
        }
        h = enkai_tensor_from_data(buf, (size_t)n * DT_SIZE[dt], js, DT_NAME[dt], dev);
    } else {
        h = enkai_tensor_full(js, v, DT_NAME[dt], dev);
    }
    TCHECK(T, h > 0 && ok_now());
    if (d) unpin(T, d);
    if (h <= 0) return;
    T->created[K_TENSOR]++;
    Entry *e = calloc(1, sizeof *e);
    e->h = h;
    e->kind = K_TENSOR;
    e->s = s;
    e->dt = dt;
    e->v = v;
    table_put(T, e);
}

static void op_create_device(Thread *T) {
    int64_t h = enkai_tensor_device("cpu");
    TCHECK(T, h > 0 && ok_now());
    if (h <= 0) return;
    T->created[K_DEVICE]++;
    Entry *e = calloc(1, sizeof *e);
    e->h = h;
    e->kind = K_DEVICE;
    table_put(T, e);
}

/* One op on one pinned shared tensor, whose outcome is known exactly. */
static void op_unary(Thread *T) {
    Entry *e = pin(T, K_TENSOR);
    if (!e) return;
    const Shape *s = &e->s;
    int64_t h = e->h, n = numel_of(s);
    double v = e->v;
    switch (rnd(T) % 12) {
    case 0: { /* sum of everything */
        Shape sc = {0, {0}};
        check_result(T, __LINE__, enkai_tensor_sum(h, -1, 0), &sc, e->dt, v * (double)n);
        break;
    }
    case 1:
        check_result(T, __LINE__, enkai_tensor_relu(h), s, e->dt, v > 0 ? v : 0);
        break;
    case 2: {
        Shape flat = {1, {n}};
        check_result(T, __LINE__, enkai_tensor_reshape(h, "[-1]"), &flat, e->dt, v);
        if (rare(T)) TCHECK(T, enkai_tensor_reshape(h, "[5,-1]") == 0 && err_is(E_SHAPE)); /* no size is a multiple of 5 */
        break;
    }
    case 3:
        if (s->nd >= 1) {
            Shape r = *s;
            r.d[0] = 1;
            check_result(T, __LINE__, enkai_tensor_slice(h, 0, 0, 1, 1), &r, e->dt, v);
            TCHECK(T, enkai_tensor_slice(h, 0, 0, 1, 0) == 0 && err_is(E_INVALID_ARG)); /* step 0 */
        }
        if (rare(T)) TCHECK(T, enkai_tensor_slice(h, 7, 0, 1, 1) == 0 && err_is(E_SHAPE)); /* dim out of range */
        break;
    case 4:
        if (s->nd >= 1) {
            Shape r = *s;
            r.d[0] = s->d[s->nd - 1];
            r.d[s->nd - 1] = s->d[0];
            check_result(T, __LINE__, enkai_tensor_transpose(h, 0, -1), &r, e->dt, v);
        }
        if (rare(T)) TCHECK(T, enkai_tensor_transpose(h, 0, 5) == 0 && err_is(E_SHAPE));
        break;
    case 5: {
        int to = (int)(rnd(T) % NDT);
        check_result(T, __LINE__, enkai_tensor_to_dtype(h, DT_NAME[to]), s, to, v);
        TCHECK(T, enkai_tensor_to_dtype(h, "fp8") == 0 && err_is(E_INVALID_ARG));
        break;
    }
    case 6: {
        double x = enkai_tensor_item(h);
        if (n == 1) TCHECK(T, x == v && ok_now());
        else TCHECK(T, isnan(x) && err_is(E_SHAPE));
        break;
    }
    case 7:
        check_tensor(T, __LINE__, h, s, e->dt, v);
        break;
    case 8: { /* copy_to's buffer rules: too small writes nothing, NULL is refused */
        unsigned char buf[MAXBYTES];
        size_t nb = (size_t)n * DT_SIZE[e->dt];
        memset(buf, 0x5a, sizeof buf);
        TCHECK(T, enkai_tensor_copy_to(h, buf, nb - 1) == 1 && err_is(E_SHAPE));
        int touched = 0;
        for (size_t i = 0; i < nb; i++) touched += buf[i] != 0x5a;
        TCHECK(T, touched == 0);
        TCHECK(T, enkai_tensor_copy_to(h, NULL, nb) == 1 && err_is(E_NULL_POINTER));
        TCHECK(T, enkai_tensor_copy_to(h, buf, sizeof buf) == 0 && ok_now() && load_elem(buf, e->dt) == v);
        break;
    }
    case 9: /* backward on a shared tensor: not one element, or (libtorch refuses) one with no graph */
        if (n != 1 || rare(T)) TCHECK(T, enkai_tensor_backward(h) == 1 && err_is(E_AUTOGRAD));
        break;
    case 10: { /* grad of a tensor that never required it: 0 with no error */
        int64_t g = enkai_tensor_grad(h);
        TCHECK(T, g == 0 && ok_now());
        break;
    }
    default: { /* to_device on the main device: a copy */
        check_result(T, __LINE__, enkai_tensor_to_device(h, main_dev), s, e->dt, v);
        break;
    }
    }
    unpin(T, e);
}

/* `typed(a, b)`, or half the time the same op by name through the generic
 * entry (`enkai_op`): a result handle, or 0 with the error set. The kwargs
 * are spelled in several ways that all mean the defaults, so the per-thread
 * parse cache sees distinct strings. */
static int64_t binary(Thread *T, int64_t (*typed)(int64_t, int64_t), const char *name, int64_t a, int64_t b) {
    static const char *KW[] = {NULL, "{}", "{\"alpha\": 1}", " { } "};
    if (rnd(T) % 2) return typed(a, b);
    int64_t in[2] = {a, b}, out[1] = {0};
    const char *kw = strcmp(name, "mul") == 0 ? KW[rnd(T) % 2] : KW[rnd(T) % 4];
    return enkai_op(name, in, 2, kw, out, 1) == 1 ? out[0] : 0;
}

/* A binary op on two pinned shared tensors (possibly the same one). */
static void op_binary(Thread *T) {
    Entry *a = pin(T, K_TENSOR);
    if (!a) return;
    Entry *b = pin(T, K_TENSOR);
    if (!b) {
        unpin(T, a);
        return;
    }
    /* PyTorch's promotion: a 0-d tensor does not raise the dtype of a dimensioned one */
    int promoted = (a->s.nd == 0) != (b->s.nd == 0) ? (a->s.nd ? a->dt : b->dt)
                   : a->dt == DT_F64 || b->dt == DT_F64 ? DT_F64 : DT_F32;
    Shape out;
    int64_t k = 0;
    int op = (int)(rnd(T) % 4);
    int fits = op < 3 ? broadcast(&a->s, &b->s, &out) : matmul_expect(&a->s, &b->s, &out, &k) && a->dt == b->dt;
    if (!fits && !rare(T)) op = -1; /* libtorch refuses: only now and then */
    switch (op) {
    case -1:
        break;
    case 0:
        if (broadcast(&a->s, &b->s, &out)) check_result(T, __LINE__, binary(T, enkai_tensor_add, "add", a->h, b->h), &out, promoted, a->v + b->v);
        else TCHECK(T, binary(T, enkai_tensor_add, "add", a->h, b->h) == 0 && err_is(E_SHAPE));
        break;
    case 1:
        if (broadcast(&a->s, &b->s, &out)) check_result(T, __LINE__, binary(T, enkai_tensor_mul, "mul", a->h, b->h), &out, promoted, a->v * b->v);
        else TCHECK(T, binary(T, enkai_tensor_mul, "mul", a->h, b->h) == 0 && err_is(E_SHAPE));
        break;
    case 2:
        if (broadcast(&a->s, &b->s, &out)) check_result(T, __LINE__, binary(T, enkai_tensor_sub, "sub", a->h, b->h), &out, promoted, a->v - b->v);
        else TCHECK(T, binary(T, enkai_tensor_sub, "sub", a->h, b->h) == 0 && err_is(E_SHAPE));
        break;
    default:
        if (!matmul_expect(&a->s, &b->s, &out, &k)) {
            TCHECK(T, enkai_tensor_matmul(a->h, b->h) == 0 && err_is(E_SHAPE));
        } else if (a->dt != b->dt) {
            TCHECK(T, enkai_tensor_matmul(a->h, b->h) == 0 && err_is(E_DTYPE));
        } else {
            check_result(T, __LINE__, enkai_tensor_matmul(a->h, b->h), &out, a->dt, a->v * b->v * (double)k);
        }
        break;
    }
    unpin(T, b);
    unpin(T, a);
}

/* Use a table handle with no pin: success, or E_HANDLE_STALE when it was freed meanwhile. */
static void op_racy(Thread *T) {
    Entry e;
    if (!peek(T, &e)) return;
    if (rnd(T) % 4 == 0) sched_yield(); /* widen the window in which another thread may free it */
    int stale = 0;
    if (e.kind == K_DEVICE) {
        if (rnd(T) % 2) {
            int rc = enkai_tensor_device_retain(e.h);
            if (rc == 0) {
                TCHECK(T, ok_now());
                T->retained[K_DEVICE]++;
                Shape s = {1, {2}};
                check_result(T, __LINE__, enkai_tensor_zeros("[2]", "fp32", e.h), &s, DT_F32, 0);
                drop_ref(T, __LINE__, K_DEVICE, e.h);
            } else {
                stale = 1;
                TCHECK(T, rc == 1 && err_is(E_HANDLE_STALE));
            }
        } else {
            int64_t r = enkai_tensor_ones("[3]", "fp64", e.h);
            if (r > 0) {
                Shape s = {1, {3}};
                check_result(T, __LINE__, r, &s, DT_F64, 1);
            } else {
                stale = 1;
                TCHECK(T, r == 0 && err_is(E_HANDLE_STALE));
            }
        }
    } else {
        int64_t n = numel_of(&e.s);
        switch (rnd(T) % 4) {
        case 0: { /* retain: once it succeeds the reference is ours and every use must succeed */
            int rc = enkai_tensor_retain(e.h);
            if (rc == 0) {
                TCHECK(T, ok_now());
                T->retained[K_TENSOR]++;
                check_tensor(T, __LINE__, e.h, &e.s, e.dt, e.v);
                Shape sc = {0, {0}};
                check_result(T, __LINE__, enkai_tensor_sum(e.h, -1, 0), &sc, e.dt, e.v * (double)n);
                drop_ref(T, __LINE__, K_TENSOR, e.h);
            } else {
                stale = 1;
                TCHECK(T, rc == 1 && err_is(E_HANDLE_STALE));
            }
            break;
        }
        case 1: {
            int64_t r = binary(T, enkai_tensor_mul, "mul", e.h, e.h);
            if (r > 0) check_result(T, __LINE__, r, &e.s, e.dt, e.v * e.v);
            else {
                stale = 1;
                TCHECK(T, r == 0 && err_is(E_HANDLE_STALE));
            }
            break;
        }
        case 2: {
            unsigned char buf[MAXBYTES];
            int rc = enkai_tensor_copy_to(e.h, buf, (size_t)n * DT_SIZE[e.dt]);
            if (rc == 0) {
                int bad = 0;
                for (int64_t i = 0; i < n; i++) bad += load_elem(buf + (size_t)i * DT_SIZE[e.dt], e.dt) != e.v;
                TCHECK(T, ok_now() && bad == 0);
            } else {
                stale = 1;
                TCHECK(T, rc == 1 && err_is(E_HANDLE_STALE));
            }
            break;
        }
        default: {
            int64_t m = enkai_tensor_numel(e.h);
            if (m >= 0) TCHECK(T, m == n && ok_now());
            else {
                stale = 1;
                TCHECK(T, m == -1 && err_is(E_HANDLE_STALE));
            }
            break;
        }
        }
    }
    if (stale) T->racy_stale++;
    else T->racy_ok++;
}

/* A private handle with two references: free, free, then every use is E_HANDLE_STALE. */
static void op_double_free(Thread *T) {
    switch (rnd(T) % 3) {
    case 0: {
        int64_t t = enkai_tensor_full("[1]", 3.0, "fp32", main_dev);
        TCHECK(T, t > 0 && ok_now());
        if (t <= 0) return;
        T->created[K_TENSOR]++;
        TCHECK(T, enkai_tensor_retain(t) == 0 && ok_now());
        T->retained[K_TENSOR]++;
        drop_ref(T, __LINE__, K_TENSOR, t); /* another reference remains: still live */
        TCHECK(T, enkai_tensor_item(t) == 3.0 && ok_now());
        drop_ref(T, __LINE__, K_TENSOR, t);
        TCHECK(T, enkai_tensor_free(t) == 1 && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_tensor_retain(t) == 1 && err_is(E_HANDLE_STALE));
        TCHECK(T, isnan(enkai_tensor_item(t)) && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_tensor_add(t, t) == 0 && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_tensor_to_dtype(t, "fp64") == 0 && err_is(E_HANDLE_STALE));
        EnkaiSlice sl = enkai_tensor_shape(t);
        TCHECK(T, sl.ptr == NULL && sl.len == 0 && err_is(E_HANDLE_STALE));
        float f = -1;
        TCHECK(T, enkai_tensor_copy_to(t, &f, sizeof f) == 1 && err_is(E_HANDLE_STALE) && f == -1);
        TCHECK(T, enkai_tensor_numel(t) == -1 && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_tensor_backward(t) == 1 && err_is(E_HANDLE_STALE));
        T->stale_checked += 10;
        bury(K_TENSOR, t);
        break;
    }
    case 1: {
        int64_t d = enkai_tensor_device("cpu");
        TCHECK(T, d > 0 && ok_now());
        if (d <= 0) return;
        T->created[K_DEVICE]++;
        TCHECK(T, enkai_tensor_device_retain(d) == 0 && ok_now());
        T->retained[K_DEVICE]++;
        drop_ref(T, __LINE__, K_DEVICE, d);
        Shape s = {1, {2}};
        check_result(T, __LINE__, enkai_tensor_zeros("[2]", "fp32", d), &s, DT_F32, 0);
        drop_ref(T, __LINE__, K_DEVICE, d);
        TCHECK(T, enkai_tensor_device_free(d) == 1 && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_tensor_device_retain(d) == 1 && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_tensor_zeros("[2]", "fp32", d) == 0 && err_is(E_HANDLE_STALE));
        T->stale_checked += 3;
        bury(K_DEVICE, d);
        break;
    }
    default: {
        int64_t sc = enkai_amp_scaler_create(65536.0, 2.0, 0.5, 2000);
        TCHECK(T, sc > 0 && ok_now());
        if (sc <= 0) return;
        T->created[K_SCALER]++;
        TCHECK(T, enkai_amp_scaler_get_scale(sc) == 65536.0 && ok_now());
        int64_t t = enkai_tensor_full("[]", 2.0, "fp32", main_dev);
        TCHECK(T, t > 0 && ok_now());
        if (t > 0) {
            T->created[K_TENSOR]++;
            Shape s0 = {0, {0}};
            check_result(T, __LINE__, enkai_amp_scale_loss(t, sc), &s0, DT_F32, 131072.0);
            drop_last(T, __LINE__, K_TENSOR, t);
        }
        TCHECK(T, enkai_amp_scaler_retain(sc) == 0 && ok_now());
        T->retained[K_SCALER]++;
        drop_ref(T, __LINE__, K_SCALER, sc);
        TCHECK(T, enkai_amp_scaler_update(sc, 1) == 0 && ok_now());
        TCHECK(T, enkai_amp_scaler_get_scale(sc) == 32768.0 && ok_now());
        drop_ref(T, __LINE__, K_SCALER, sc);
        TCHECK(T, enkai_amp_scaler_free(sc) == 1 && err_is(E_HANDLE_STALE));
        TCHECK(T, isnan(enkai_amp_scaler_get_scale(sc)) && err_is(E_HANDLE_STALE));
        TCHECK(T, enkai_amp_scaler_update(sc, 0) == 1 && err_is(E_HANDLE_STALE));
        T->stale_checked += 3;
        bury(K_SCALER, sc);
        break;
    }
    }
}

/* A handle some thread freed for good: whatever any thread does with it is E_HANDLE_STALE. */
static void op_graveyard(Thread *T) {
    pthread_mutex_lock(&grave_mu);
    int have = grave_n > 0;
    int64_t h = 0;
    int kind = 0;
    if (have) {
        int i = (int)(rnd(T) % (uint32_t)grave_n);
        h = grave[i].h;
        kind = grave[i].kind;
    }
    pthread_mutex_unlock(&grave_mu);
    if (!have) return;
    int r = (int)(rnd(T) % 4);
    if (r == 0) {
        TCHECK(T, free_kind(kind, h) == 1 && err_is(E_HANDLE_STALE));
    } else if (r == 1) {
        TCHECK(T, retain_kind(kind, h) == 1 && err_is(E_HANDLE_STALE));
    } else if (r == 2) {
        switch (kind) {
        case K_TENSOR: TCHECK(T, enkai_tensor_relu(h) == 0 && err_is(E_HANDLE_STALE)); break;
        case K_DEVICE: TCHECK(T, enkai_tensor_ones("[1]", "fp32", h) == 0 && err_is(E_HANDLE_STALE)); break;
        case K_OPT: TCHECK(T, enkai_opt_adamw_step(h) == 1 && err_is(E_HANDLE_STALE)); break;
        default: TCHECK(T, isnan(enkai_amp_scaler_get_scale(h)) && err_is(E_HANDLE_STALE)); break;
        }
    } else {
        switch (kind) {
        case K_TENSOR: TCHECK(T, enkai_tensor_sum(h, -1, 0) == 0 && err_is(E_HANDLE_STALE)); break;
        case K_DEVICE: TCHECK(T, enkai_tensor_device_free(h) == 1 && err_is(E_HANDLE_STALE)); break;
        case K_OPT: TCHECK(T, enkai_opt_state_bytes(h) == -1 && err_is(E_HANDLE_STALE)); break;
        default: TCHECK(T, enkai_amp_scaler_update(h, 0) == 1 && err_is(E_HANDLE_STALE)); break;
        }
    }
    T->stale_checked++;
    /* a stale handle passed as another kind: refused, whichever of the two it names */
    int other = (kind + 1 + (int)(rnd(T) % 3)) % NKINDS;
    int rc = free_kind(other, h);
    TCHECK(T, rc == 1 && (err_is(E_HANDLE_KIND) || err_is(E_HANDLE_STALE)));
}

/* Wrong-kind and never-issued handles: refused with the exact code, and nothing is freed. */
static void op_wrong_kind(Thread *T) {
    Entry *d = pin(T, K_DEVICE);
    Entry *t = pin(T, K_TENSOR);
    if (d) {
        TCHECK(T, isnan(enkai_tensor_item(d->h)) && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_tensor_free(d->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_tensor_retain(d->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_tensor_opt_free(d->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_amp_scaler_free(d->h) == 1 && err_is(E_HANDLE_KIND));
        if (t) TCHECK(T, enkai_tensor_add(t->h, d->h) == 0 && err_is(E_HANDLE_KIND));
        /* the device survived all that */
        Shape s = {1, {1}};
        check_result(T, __LINE__, enkai_tensor_ones("[1]", "fp32", d->h), &s, DT_F32, 1);
        T->kind_checked += 6;
    }
    if (t) {
        TCHECK(T, enkai_tensor_device_free(t->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_tensor_device_retain(t->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_tensor_zeros("[1]", "fp32", t->h) == 0 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_opt_adamw_step(t->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_opt_retain(t->h) == 1 && err_is(E_HANDLE_KIND));
        TCHECK(T, enkai_tensor_to_device(t->h, t->h) == 0 && err_is(E_HANDLE_KIND));
        check_tensor(T, __LINE__, t->h, &t->s, t->dt, t->v); /* still intact */
        T->kind_checked += 6;
    }
    TCHECK(T, isnan(enkai_tensor_item(0)) && err_is(E_HANDLE_INVALID));
    TCHECK(T, enkai_tensor_free(-1) == 1 && err_is(E_HANDLE_INVALID));
    TCHECK(T, enkai_tensor_retain((int64_t)1 << 53) == 1 && err_is(E_HANDLE_INVALID));
    TCHECK(T, enkai_tensor_device_free(5) == 1 && err_is(E_HANDLE_INVALID));
    TCHECK(T, enkai_tensor_free(((int64_t)1 << 48) | 4000000) == 1 && err_is(E_HANDLE_INVALID)); /* never issued */
    if (t) unpin(T, t);
    if (d) unpin(T, d);
}

/* ---- each thread's own model ---------------------------------------------------- */

enum { V = 16, S = 4, D = 8, L = 1, H = 2, B = 2, STEPS = 3 };
static const uint32_t IN[B * S] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint32_t TGT[B * S] = {2, 3, 4, 5, 6, 7, 8, 9};
static uint64_t base_seed;
static double *ref_loss; /* per thread: the first loss of its model, computed before the threads start */

/* Collects the handles of a JSON list (0 entries skipped); returns how many. */
static int parse_handles(const char *json, int64_t *out, int cap) {
    int n = 0;
    for (const char *p = json; p && *p;) {
        if (*p >= '0' && *p <= '9') {
            char *end;
            long long h = strtoll(p, &end, 10);
            if (h && n < cap) out[n++] = h;
            p = end;
        } else {
            p++;
        }
    }
    return n;
}

/* A TinyLM's initial loss for `seed`, or NaN; everything created is freed. */
static double initial_loss(Thread *T, int64_t seed) {
    int64_t dev = enkai_tensor_device("cpu");
    TCHECK(T, dev > 0 && ok_now());
    if (dev <= 0) return NAN;
    T->created[K_DEVICE]++;
    char *params = NULL;
    size_t plen = 0;
    double l = NAN;
    int rc = enkai_tensor_tinylm_init(V, S, D, L, H, dev, seed, &params, &plen);
    TCHECK(T, rc == 0 && ok_now());
    if (rc == 0) {
        int64_t ps[64];
        int np = parse_handles(params, ps, 64);
        T->created[K_TENSOR] += np;
        int64_t loss = enkai_tensor_forward_tinylm(params, IN, B * S, TGT, B * S, B, S, H);
        TCHECK(T, loss > 0 && ok_now());
        if (loss > 0) {
            T->created[K_TENSOR]++;
            l = enkai_tensor_item(loss);
            drop_ref(T, __LINE__, K_TENSOR, loss);
        }
        for (int i = 0; i < np; i++) drop_ref(T, __LINE__, K_TENSOR, ps[i]);
        enkai_tensor_string_free(params);
    }
    drop_ref(T, __LINE__, K_DEVICE, dev);
    return l;
}

static void op_train(Thread *T) {
    int64_t dev = enkai_tensor_device("cpu");
    TCHECK(T, dev > 0 && ok_now());
    if (dev <= 0) return;
    T->created[K_DEVICE]++;
    char *params = NULL;
    size_t plen = 0;
    int rc = enkai_tensor_tinylm_init(V, S, D, L, H, dev, (int64_t)(base_seed + (uint64_t)T->id), &params, &plen);
    TCHECK(T, rc == 0 && ok_now() && params && plen == strlen(params));
    if (rc != 0) {
        drop_last(T, __LINE__, K_DEVICE, dev);
        return;
    }
    int64_t ps[64];
    int np = parse_handles(params, ps, 64);
    TCHECK(T, np > 4 && np < 64);
    T->created[K_TENSOR] += np;
    int64_t opt = enkai_opt_adamw_create(params, 1e-2, 0.9, 0.999, 1e-8, 0.0);
    TCHECK(T, opt > 0 && ok_now());
    if (opt > 0) T->created[K_OPT]++;
    double first = NAN, last = NAN;
    for (int step = 0; step < STEPS; step++) {
        TCHECK(T, enkai_tensor_zero_grad_multi(params) == 0 && ok_now());
        int64_t loss = enkai_tensor_forward_tinylm(params, IN, B * S, TGT, B * S, B, S, H);
        TCHECK(T, loss > 0 && ok_now());
        if (loss <= 0) break;
        T->created[K_TENSOR]++;
        double l = enkai_tensor_item(loss);
        TCHECK(T, isfinite(l) && ok_now());
        if (step == 0) {
            first = l;
            if (l != ref_loss[T->id]) {
                T->seed_mismatch++;
                if (T->seed_mismatch <= 3)
                    fprintf(stderr, "stress: thread %d: tinylm_init(seed %" PRIu64 ") gave initial loss %.9g, "
                                    "alone before the threads %.9g\n",
                            T->id, base_seed + (uint64_t)T->id, l, ref_loss[T->id]);
            }
        }
        last = l;
        TCHECK(T, enkai_tensor_backward(loss) == 0 && ok_now());
        if (step == 0) TCHECK(T, enkai_tensor_backward(loss) == 1 && err_is(E_AUTOGRAD)); /* graph freed */
        if (opt > 0) TCHECK(T, enkai_opt_adamw_step(opt) == 0 && ok_now());
        drop_last(T, __LINE__, K_TENSOR, loss);
    }
    TCHECK(T, last < first);
    /* the grads exist now: one new handle per param */
    char *grads = NULL;
    size_t glen = 0;
    TCHECK(T, enkai_tensor_grad_multi(params, &grads, &glen) == 0 && ok_now());
    if (grads) {
        int64_t gs[64];
        int ng = parse_handles(grads, gs, 64);
        TCHECK(T, ng == np);
        T->created[K_TENSOR] += ng;
        double total = -1;
        TCHECK(T, enkai_tensor_clip_grad_norm_multi(grads, 1.0, 2.0, &total) == 0 && ok_now() && total > 0);
        for (int i = 0; i < ng; i++) drop_ref(T, __LINE__, K_TENSOR, gs[i]);
        enkai_tensor_string_free(grads);
    }
    if (opt > 0) {
        TCHECK(T, enkai_opt_state_bytes(opt) > 0 && ok_now());
        TCHECK(T, enkai_opt_retain(opt) == 0 && ok_now());
        T->retained[K_OPT]++;
        drop_ref(T, __LINE__, K_OPT, opt);
        TCHECK(T, enkai_opt_adamw_step(opt) == 0 && ok_now()); /* still live */
        drop_last(T, __LINE__, K_OPT, opt);
        TCHECK(T, enkai_opt_adamw_step(opt) == 1 && err_is(E_HANDLE_STALE));
    }
    /* params: the optimizer released its references, so ours are the last */
    for (int i = 0; i < np; i++) {
        if (i == 0) drop_last(T, __LINE__, K_TENSOR, ps[i]);
        else drop_ref(T, __LINE__, K_TENSOR, ps[i]);
    }
    TCHECK(T, enkai_tensor_zero_grad_multi(params) == 1 && err_is(E_HANDLE_STALE));
    enkai_tensor_string_free(params);
    drop_last(T, __LINE__, K_DEVICE, dev);
    T->trains++;
}

/* ---- threads, watchdog, main ------------------------------------------------------ */

static long ops_per_thread;
#define TRAIN_EVERY 2000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
    Thread *T = arg;
    double t0 = now_s();
    long offset = (long)T->id * (TRAIN_EVERY / 8); /* stagger the threads' training */
    for (T->ops = 0; T->ops < ops_per_thread; T->ops++) {
        if ((T->ops + offset) % TRAIN_EVERY == 0) {
            op_train(T);
            continue;
        }
        uint32_t r = rnd(T) % 100;
        if (r < 14) op_create_tensor(T);
        else if (r < 17) op_create_device(T);
        else if (r < 27) table_remove(T);
        else if (r < 54) op_unary(T);
        else if (r < 69) op_binary(T);
        else if (r < 81) op_racy(T);
        else if (r < 87) op_double_free(T);
        else if (r < 95) op_graveyard(T);
        else op_wrong_kind(T);
    }
    T->secs = now_s() - t0;
    return NULL;
}

static char alarm_msg[96];
static size_t alarm_len;

static void on_alarm(int sig) {
    (void)sig;
    ssize_t w = write(2, alarm_msg, alarm_len);
    (void)w;
    _exit(2);
}

int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 8;
    ops_per_thread = argc > 2 ? atol(argv[2]) : 100000;
    base_seed = argc > 3 ? strtoull(argv[3], NULL, 10) : (uint64_t)time(NULL);
    int limit = argc > 4 ? atoi(argv[4]) : 300;
    if (nthreads < 1 || nthreads > 256 || ops_per_thread < 0 || limit < 1) {
        fprintf(stderr, "usage: stress [threads] [ops_per_thread] [seed] [timeout_s]\n");
        return 2;
    }
    printf("stress: seed %" PRIu64 "\n", base_seed);
    fflush(stdout);

    alarm_len = (size_t)snprintf(alarm_msg, sizeof alarm_msg, "stress: deadlock or too slow after %d s\n", limit);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm((unsigned)limit);

    int64_t t0 = enkai_tensor_live_tensors(), d0 = enkai_tensor_live_devices();
    int64_t o0 = enkai_tensor_live_opts(), s0 = enkai_tensor_live_scalers();

    Thread *th = calloc((size_t)nthreads + 1, sizeof *th);
    Thread *M = &th[nthreads]; /* main's own bookkeeping */
    M->id = -1;
    uint64_t sm = base_seed ^ 0xA5A5A5A5ull;
    M->rng = splitmix64(&sm) | 1;

    main_dev = enkai_tensor_device("cpu");
    CHECK(main_dev > 0);
    M->created[K_DEVICE]++;

    /* reference losses, one model at a time */
    ref_loss = calloc((size_t)nthreads, sizeof *ref_loss);
    for (int i = 0; i < nthreads; i++) {
        ref_loss[i] = initial_loss(M, (int64_t)(base_seed + (uint64_t)i));
        CHECK(isfinite(ref_loss[i]));
    }
    /* and the table half full to start with */
    for (int i = 0; i < SLOTS / 2; i++) {
        if (i % 8 == 0) op_create_device(M);
        else op_create_tensor(M);
    }

    double start = now_s();
    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    for (int i = 0; i < nthreads; i++) {
        th[i].id = i;
        uint64_t s = base_seed + (uint64_t)i * 0x1000193ull + 1;
        th[i].rng = splitmix64(&s) | 1;
        CHECK(pthread_create(&tid[i], NULL, worker, &th[i]) == 0);
    }
    for (int i = 0; i < nthreads; i++) CHECK(pthread_join(tid[i], NULL) == 0);
    double wall = now_s() - start;

    /* every thread released what it held: only the table's entries (and main_dev) are live */
    int64_t table_tensors = 0, table_devices = 0;
    int pinned = 0;
    for (int i = 0; i < SLOTS; i++) {
        if (!table[i]) continue;
        pinned += table[i]->pins != 0;
        if (table[i]->kind == K_TENSOR) table_tensors++;
        else table_devices++;
    }
    CHECK(pinned == 0);
    CHECK(enkai_tensor_live_tensors() == t0 + table_tensors);
    CHECK(enkai_tensor_live_devices() == d0 + 1 + table_devices);
    CHECK(enkai_tensor_live_opts() == o0);
    CHECK(enkai_tensor_live_scalers() == s0);
    for (int i = 0; i < SLOTS; i++) {
        Entry *e = take_locked(i);
        if (e) retire(M, e);
    }
    drop_ref(M, __LINE__, K_DEVICE, main_dev);
    CHECK(enkai_tensor_live_tensors() == t0);
    CHECK(enkai_tensor_live_devices() == d0);
    CHECK(enkai_tensor_live_opts() == o0);
    CHECK(enkai_tensor_live_scalers() == s0);

    long tot[NKINDS][3] = {{0}};
    long ops = 0, racy_ok = 0, racy_stale = 0, stale = 0, kind = 0, trains = 0, mismatch = 0;
    for (int i = 0; i <= nthreads; i++) {
        Thread *T = &th[i];
        for (int k = 0; k < NKINDS; k++) {
            tot[k][0] += T->created[k];
            tot[k][1] += T->retained[k];
            tot[k][2] += T->freed[k];
        }
        if (i == nthreads) {
            CHECK(T->fails == 0);
            break;
        }
        ops += T->ops;
        racy_ok += T->racy_ok;
        racy_stale += T->racy_stale;
        stale += T->stale_checked;
        kind += T->kind_checked;
        trains += T->trains;
        mismatch += T->seed_mismatch;
        printf("stress: thread %d: %ld ops in %.2f s, %ld trainings, %ld failed checks\n", i, T->ops, T->secs,
               T->trains, T->fails);
        CHECK(T->ops == ops_per_thread);
        CHECK(T->fails == 0);
    }
    for (int k = 0; k < NKINDS; k++) {
        printf("stress: %s: %ld created + %ld retained = %ld freed\n", KIND_NAME[k], tot[k][0], tot[k][1], tot[k][2]);
        CHECK(tot[k][0] + tot[k][1] == tot[k][2]);
    }
    printf("stress: %ld ops on %d threads in %.2f s; racy uses %ld ok / %ld stale; %ld stale and %ld wrong-kind "
           "checks; %ld trainings\n",
           ops, nthreads, wall, racy_ok, racy_stale, stale, kind, trains);
    if (mismatch)
        fprintf(stderr, "stress: %ld trainings started from other weights than tinylm_init(seed) gives alone\n",
                mismatch);
    CHECK(mismatch == 0); /* tinylm_init's weights depend on its seed only, whatever other threads do */
    free(tid);
    free(ref_loss);
    free(th);
    return SUMMARY("capi-stress");
}
