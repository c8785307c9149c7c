/* hf_common.h: what the Hugging Face examples (gpt2_generate.c,
 * llama_generate.c) share: error exits, one-result ops, a small JSON reader
 * for config.json (depth-limited: a hostile file is a clean E_CKPT_FORMAT
 * exit, never a crash), the prompt's ids, and the next-token pick. Every
 * function is static: each program compiles its own copy (the generation
 * helpers are marked unused: llama_train, which only trains, takes the rest). */
#ifndef HF_COMMON_H
#define HF_COMMON_H
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "enkai_tensor.h"

#define MAYBE_UNUSED __attribute__((unused))

static void fail(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, enkai_tensor_last_error());
    exit(1);
}

static int64_t must(int64_t h, const char *what) {
    if (h == 0) fail(what);
    return h;
}

/* One-result op: torch.<name>(*inputs, **kwargs). */
static int64_t op(const char *name, const int64_t *inputs, size_t n, const char *kwargs) {
    int64_t out;
    if (enkai_op(name, inputs, n, kwargs, &out, 1) != 1) fail(name);
    return out;
}

static void drop(int64_t t) {
    if (enkai_tensor_free(t)) fail("free");
}

/* Frees `old` and returns `next`: keeps `x = then(x, f(x))` chains short. */
static int64_t then(int64_t old, int64_t next) {
    drop(old);
    return next;
}

/* Whether `get` copies each weight out of the file's mapping (set by main:
 * on the CPU unless --mmap). On the CPU `enkai_safetensors_get` returns a
 * view of the mapping, on the page cache's 4 KiB pages; the library's own
 * large buffers sit on huge pages, which one core reads faster. A step at
 * batch 1 reads every weight once, so its speed is that read rate: for
 * GPT-2-small on the native backend at 1 thread, 20.0-23.5 tokens/s with
 * copies against 17.0-19.6 from the mapping (five alternating runs each;
 * the libtorch backend, 16.6-18.7 against 16.2-17.5). --mmap keeps the
 * views: no copy at load, and the page cache is the only copy in memory. */
MAYBE_UNUSED static int copy_weights;

/* The tensor `prefix` + `name` of an open safetensors file as the library
 * gets it (on the CPU a view of the file's mapping), or exit naming it. */
MAYBE_UNUSED static int64_t get_view(int64_t st, const char *prefix, const char *name, int64_t dev) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    int64_t t = enkai_safetensors_get(st, full, dev);
    if (!t) fail(full);
    return t;
}

/* `get_view`, copied when `copy_weights`. */
MAYBE_UNUSED static int64_t get(int64_t st, const char *prefix, const char *name, int64_t dev) {
    int64_t t = get_view(st, prefix, name, dev);
    return copy_weights ? then(t, op("clone", &t, 1, NULL)) : t;
}

/* `length` positions of `t` along `dim` from `start` (a view). */
MAYBE_UNUSED static int64_t narrow(int64_t t, int dim, int64_t start, int64_t length) {
    char kw[96];
    snprintf(kw, sizeof kw, "{\"dim\": %d, \"start\": %lld, \"length\": %lld}", dim, (long long)start, (long long)length);
    return op("narrow", &t, 1, kw);
}

/* The KV cache, [1, heads, capacity, head_dim], allocated once: writes x
 * ([1, heads, T, head_dim], freed) into positions past..past+T-1 in place
 * and returns the filled part, a view. No step copies the whole cache. */
MAYBE_UNUSED static int64_t cache_put(int64_t cache, int64_t x, int64_t past, int64_t T) {
    int64_t slot = narrow(cache, 2, past, T);
    int64_t in[] = {slot, x};
    drop(then(slot, op("copy_", in, 2, NULL)));
    drop(x);
    return narrow(cache, 2, 0, past + T);
}

/* ---- config.json: a small JSON reader for the fields GPT-2 needs ---- */

typedef struct {
    const char *p, *start, *path;
} Json;

/* E_CKPT_FORMAT: the library's code for a faulty model file. */
static void json_fail(Json *j, const char *what) {
    fprintf(stderr, "E_CKPT_FORMAT: %s: %s (byte %ld)\n", j->path, what, (long)(j->p - j->start));
    exit(1);
}

static void config_fail(const char *path, const char *what) {
    fprintf(stderr, "E_CKPT_FORMAT: %s: %s\n", path, what);
    exit(1);
}

static void ws(Json *j) {
    while (isspace((unsigned char)*j->p)) j->p++;
}

/* A string's contents into buf (escapes kept as the escaped character, \u as '?':
 * only ASCII keys and names are compared). */
static void json_string(Json *j, char *buf, size_t cap) {
    size_t n = 0;
    if (*j->p != '"') json_fail(j, "expected a string");
    for (j->p++; *j->p != '"'; j->p++) {
        char c = *j->p;
        if (c == '\0' || (unsigned char)c < 0x20) json_fail(j, "unterminated string");
        if (c == '\\') {
            c = *++j->p;
            if (c == 'u') {
                for (int i = 0; i < 4; i++)
                    if (!isxdigit((unsigned char)*++j->p)) json_fail(j, "bad \\u escape");
                c = '?';
            } else if (!c || !strchr("\"\\/bfnrt", c)) {
                json_fail(j, "bad escape");
            }
        }
        if (n + 1 < cap) buf[n++] = c;
    }
    j->p++;
    if (cap) buf[n] = '\0';
}

static double json_number(Json *j) {
    char *end;
    double v = strtod(j->p, &end);
    if (end == j->p || !isfinite(v)) json_fail(j, "expected a number");
    j->p = end;
    return v;
}

/* Skips any value; depth-limited so a hostile file cannot overflow the stack. */
static void json_skip(Json *j, int depth) {
    ws(j);
    if (depth > 64) json_fail(j, "nested too deeply");
    char c = *j->p;
    if (c == '"') {
        json_string(j, NULL, 0);
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        ws(j);
        if (*j->p == close) {
            j->p++;
            return;
        }
        for (;;) {
            if (c == '{') {
                ws(j);
                json_string(j, NULL, 0);
                ws(j);
                if (*j->p++ != ':') json_fail(j, "expected ':'");
            }
            json_skip(j, depth + 1);
            ws(j);
            if (*j->p == ',') {
                j->p++;
            } else if (*j->p == close) {
                j->p++;
                return;
            } else {
                json_fail(j, "expected ',' or a closing bracket");
            }
        }
    } else if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4)) {
        j->p += 4;
    } else if (!strncmp(j->p, "false", 5)) {
        j->p += 5;
    } else {
        json_number(j);
    }
}

static int json_bool(Json *j) {
    if (!strncmp(j->p, "true", 4)) return j->p += 4, 1;
    if (!strncmp(j->p, "false", 5)) return j->p += 5, 0;
    json_fail(j, "expected true or false");
    return 0;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "E_CKPT_MISSING: cannot open %s\n", path);
        exit(1);
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    if (!buf || ferror(f)) {
        fprintf(stderr, "E_CKPT_IO: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* One key of a config file: a number, a string, a bool, an object read
 * with keys of its own, or only whether it is present and not null. A null
 * value counts as absent. */
typedef struct ConfigKey {
    const char *name;
    double *num;
    char *str;
    size_t str_cap;
    int *flag;
    int *present;
    const struct ConfigKey *obj;
    size_t obj_n;
} ConfigKey;

static void read_object(Json *j, const ConfigKey *keys, size_t n, int depth) {
    if (depth > 8) json_fail(j, "nested too deeply");
    ws(j);
    if (*j->p++ != '{') json_fail(j, "expected an object");
    ws(j);
    while (*j->p != '}') {
        char key[64];
        json_string(j, key, sizeof key);
        ws(j);
        if (*j->p++ != ':') json_fail(j, "expected ':'");
        ws(j);
        const ConfigKey *k = NULL;
        for (size_t i = 0; i < n && !k; i++)
            if (!strcmp(key, keys[i].name)) k = &keys[i];
        if (k && k->present && strncmp(j->p, "null", 4)) *k->present = 1;
        if (!k || !strncmp(j->p, "null", 4)) json_skip(j, depth);
        else if (k->num) *k->num = json_number(j);
        else if (k->str) json_string(j, k->str, k->str_cap);
        else if (k->flag) *k->flag = json_bool(j);
        else if (k->obj) read_object(j, k->obj, k->obj_n, depth + 1);
        else json_skip(j, depth);
        ws(j);
        if (*j->p == ',') {
            j->p++;
            ws(j);
        } else if (*j->p != '}') {
            json_fail(j, "expected ',' or '}'");
        }
    }
    j->p++;
}

/* Reads the object in `path` into the keys it names; other keys are skipped. */
static void read_config_keys(const char *path, const ConfigKey *keys, size_t n) {
    char *text = read_file(path);
    Json j = {text, text, path};
    read_object(&j, keys, n, 0);
    ws(&j);
    if (*j.p) json_fail(&j, "trailing characters");
    free(text);
}

/* Whether v is a whole number in [lo, hi]. */
static int whole(double v, double lo, double hi) {
    return v >= lo && v <= hi && v == floor(v);
}

/* The comma-separated prompt ids, each below `vocab`, with room for `extra` more. */
MAYBE_UNUSED static uint32_t *parse_ids(const char *text, int64_t vocab, size_t extra, size_t *count) {
    size_t T = 0, cap = extra + 1;
    for (const char *p = text; *p; p++) cap += *p == ',';
    uint32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) fail("malloc");
    for (const char *p = text;;) {
        char *end;
        long long id = strtoll(p, &end, 10);
        if (end == p || id < 0 || id >= vocab || (*end && *end != ',')) {
            fprintf(stderr, "E_INVALID_ARG: prompt ids: \"%s\" is not a comma-separated list of ids below %lld\n",
                    text, (long long)vocab);
            exit(1);
        }
        ids[T++] = (uint32_t)id;
        if (!*end) break;
        p = end + 1;
    }
    *count = T;
    return ids;
}

/* The next token from the last position's logits [1, V]: the argmax, or a
 * draw after dividing by the temperature, as transformers' sampling warpers
 * do it: from the top k (topk > 0), then from the nucleus (0 < topp < 1:
 * TopPLogitsWarper's smallest set of most probable tokens whose probability
 * reaches topp; at least the most probable one), or from all tokens. The
 * draw is `multinomial`, from the library's generator (manual_seed). */
MAYBE_UNUSED static uint32_t pick(int64_t logits, int topk, double topp, double temperature) {
    int64_t token;
    if (topk <= 0 && !(topp > 0)) {
        token = op("argmax", &logits, 1, "{\"dim\": -1}");
    } else {
        char kw[64], top_kw[32];
        snprintf(kw, sizeof kw, "{\"other\": %.17g}", temperature);
        int64_t scaled = op("div", &logits, 1, kw), top[2];
        /* The candidates in descending order: top[0] the scaled logits, top[1] their ids. */
        if (topk > 0) {
            snprintf(top_kw, sizeof top_kw, "{\"k\": %d}", topk);
            if (enkai_op("topk", &scaled, 1, top_kw, top, 2) != 2) fail("topk");
        } else if (enkai_op("sort", &scaled, 1, "{\"dim\": -1, \"descending\": true}", top, 2) != 2) {
            fail("sort");
        }
        drop(scaled);
        if (topp > 0 && topp < 1) {
            /* TopPLogitsWarper drops the tokens whose ascending cumulative
             * probability is <= 1 - topp; in descending order that is the
             * tokens whose more probable predecessors already sum to >= topp
             * (an exclusive cumsum, 0 for the first: it always stays). */
            int64_t p = must(enkai_tensor_softmax(top[0], -1), "softmax");
            int64_t cum = op("cumsum", &p, 1, "{\"dim\": -1}");
            int64_t before = must(enkai_tensor_sub(cum, p), "sub");
            snprintf(kw, sizeof kw, "{\"other\": %.17g}", topp);
            int64_t out = op("ge", &before, 1, kw);
            int64_t in[] = {top[0], out};
            int64_t kept = op("masked_fill", in, 2, "{\"value\": -Infinity}");
            int64_t done[] = {p, cum, before, out, top[0]};
            for (size_t i = 0; i < 5; i++) drop(done[i]);
            top[0] = kept;
        }
        int64_t probs = must(enkai_tensor_softmax(top[0], -1), "softmax");
        int64_t drawn = op("multinomial", &probs, 1, "{\"num_samples\": 1}");
        token = op("gather", (int64_t[]){top[1], drawn}, 2, "{\"dim\": -1}");
        int64_t done[] = {top[0], top[1], probs, drawn};
        for (size_t i = 0; i < 4; i++) drop(done[i]);
    }
    double t = enkai_tensor_item(token);
    if (enkai_tensor_last_error_code()) fail("item");
    drop(token);
    return (uint32_t)t;
}

MAYBE_UNUSED static void print_logits(int64_t logits, int64_t T, int64_t V) {
    int64_t f = must(enkai_tensor_to_dtype(logits, "fp32"), "to_dtype");
    float *v = malloc((size_t)(T * V) * sizeof *v);
    if (!v || enkai_tensor_copy_to(f, v, (size_t)(T * V) * sizeof *v)) fail("copy_to");
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < V; i++) printf("%.9g%c", v[t * V + i], i + 1 < V ? ' ' : '\n');
    free(v);
    drop(f);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
