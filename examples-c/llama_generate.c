/* llama_generate: loads a Hugging Face Llama checkpoint (config.json and
 * model.safetensors, as transformers' save_pretrained writes them for
 * LlamaForCausalLM) and generates tokens with a KV cache: the prompt in one
 * pass, then one token per step. Greedy by default, or sampling: top-k,
 * top-p (nucleus) or both.
 *
 *   llama_generate MODEL_DIR PROMPT_IDS N_NEW [--topk K] [--topp P]
 *                  [--temperature T] [--seed S] [--device D] [--threads N]
 *                  [--no-cache] [--print-logits] [--mmap] [--mem-report N]
 *                  [--quantize q8_0|qint8]
 *
 * The model: RMSNorm (`rms_norm`), rotary position embeddings with the
 * config's rope_theta (transformers' rotate-half form), grouped-query
 * attention (`scaled_dot_product_attention` with enable_gqa, num_key_value_heads
 * key/value heads), a SwiGLU MLP (`silu(gate) * up`), and an lm_head tied or
 * untied as tie_word_embeddings says. Every layer is an op of the library's
 * table, called by its PyTorch name.
 *
 * The cache is allocated once per layer at the length the run needs,
 * [1, kv_heads, prompt + N_NEW, head_dim], and each step writes its keys
 * and values into it in place (`narrow` + `copy_`) and attends over the
 * filled part (a view), with grad mode off: memory stays flat while
 * generating (--mem-report N prints to stderr, every N new tokens, the
 * live tensor handles and the process's resident memory, "mem: tokens 100
 * live_tensors 27 rss_kb 51200": the test that it does). --no-cache
 * recomputes the whole sequence every step instead (the test that the
 * cache changes nothing).
 *
 * Output as gpt2_generate's: the new ids on the last line, after the
 * prompt's logits with --print-logits; tokens/s on stderr. The backend is
 * the library's default or ENKAI_BACKEND (torch, cpu).
 * Build: make build/examples/llama_generate */
#include "hf_common.h"
#include "llama_config.h"
#include <unistd.h> /* sysconf */

/* ---- config.json ---- */

static Config read_config(const char *path) {
    Config c = llama_read_config(path);
    /* Variants this program does not implement: refused, never run wrong. */
    if (strcmp(c.act, "silu") || c.rope_scaling || strcmp(c.rope_type, "default")) {
        fprintf(stderr, "E_UNSUPPORTED: %s: only hidden_act silu and the default rope_type, without rope_scaling\n", path);
        exit(1);
    }
    return c;
}

/* ---- the model ---- */

enum { IN_NORM, Q, K, V, O, POST_NORM, GATE, UP, DOWN, WEIGHTS };
static const char *const SUFFIX[WEIGHTS] = {
    "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

typedef struct {
    int64_t w[WEIGHTS], b[WEIGHTS]; /* weights [out, in] as nn.Linear keeps them; biases or 0 */
    int64_t k, v;                   /* the cache: [1, kv_heads, capacity, head_dim] */
} Layer;

typedef struct {
    int64_t C, H, KV, D, L, V, P;
    double eps;
    int64_t embed, norm, head, cos, sin; /* cos, sin: [capacity, head_dim] */
    Layer *layer;
    char rms_kw[96];
} Model;

static int has(const char *names, const char *name) {
    char quoted[256];
    snprintf(quoted, sizeof quoted, "\"%s\"", name);
    return strstr(names, quoted) != NULL;
}

/* The rotary tables for positions 0..cap-1, as transformers' LlamaRotaryEmbedding
 * makes them: inv_freq_i = 1 / theta^(2i/D) in fp32, the angles duplicated
 * over both halves of the head, then in the weights' dtype. */
static void rope_tables(Model *m, double theta, int64_t cap, int64_t dev, const char *dtype) {
    size_t n = (size_t)(cap * m->D);
    float *c = malloc(n * sizeof *c), *s = malloc(n * sizeof *s);
    if (!c || !s) fail("malloc");
    for (int64_t p = 0; p < cap; p++)
        for (int64_t i = 0; i < m->D / 2; i++) {
            float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)m->D);
            float a = (float)p * inv;
            c[p * m->D + i] = c[p * m->D + i + m->D / 2] = cosf(a);
            s[p * m->D + i] = s[p * m->D + i + m->D / 2] = sinf(a);
        }
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)cap, (long long)m->D);
    m->cos = must(enkai_tensor_from_data(c, n * sizeof *c, shape, "fp32", dev), "from_data");
    m->sin = must(enkai_tensor_from_data(s, n * sizeof *s, shape, "fp32", dev), "from_data");
    m->cos = then(m->cos, must(enkai_tensor_to_dtype(m->cos, dtype), "to_dtype"));
    m->sin = then(m->sin, must(enkai_tensor_to_dtype(m->sin, dtype), "to_dtype"));
    free(c);
    free(s);
}

/* Loads the weights, and allocates the caches and rotary tables for `cap` positions. */
static Model load(const char *dir, int64_t cap_wanted, int64_t dev) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    Config c = read_config(path);
    Model m = {.C = (int64_t)c.hidden, .H = (int64_t)c.heads, .KV = (int64_t)c.kv_heads, .D = (int64_t)c.head_dim,
               .L = (int64_t)c.layers, .V = (int64_t)c.vocab, .P = (int64_t)c.positions, .eps = c.eps};
    snprintf(m.rms_kw, sizeof m.rms_kw, "{\"normalized_shape\": [%lld], \"eps\": %.17g}", (long long)m.C, m.eps);

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int64_t st = must(enkai_safetensors_open(path), "safetensors_open");
    char *names;
    size_t len;
    if (enkai_safetensors_names(st, &names, &len)) fail("safetensors_names");
    /* LlamaForCausalLM saves its body under "model."; a bare LlamaModel does not. */
    const char *pre = has(names, "model.embed_tokens.weight") ? "model." : "";
    int untied = has(names, "lm_head.weight");
    enkai_tensor_string_free(names);

    m.embed = get(st, pre, "embed_tokens.weight", dev);
    m.norm = get(st, pre, "norm.weight", dev);
    /* Tied: the logits are h @ embed^T, the same weight as nn.Linear's [out, in]. */
    if (untied && !c.tied) m.head = get(st, "", "lm_head.weight", dev);
    else if (c.tied) {
        if (enkai_tensor_retain(m.embed)) fail("retain");
        m.head = m.embed;
    } else {
        fprintf(stderr, "E_INVALID_ARG: %s: no tensor \"lm_head.weight\" and tie_word_embeddings is false\n", path);
        exit(1);
    }
    m.layer = calloc((size_t)m.L, sizeof *m.layer);
    if (!m.layer) fail("calloc");
    for (int64_t i = 0; i < m.L; i++) {
        Layer *l = &m.layer[i];
        for (int s = 0; s < WEIGHTS; s++) {
            char name[128];
            snprintf(name, sizeof name, "layers.%lld.%s.weight", (long long)i, SUFFIX[s]);
            l->w[s] = get(st, pre, name, dev);
            int biased = (s >= Q && s <= O && c.attn_bias) || (s >= GATE && c.mlp_bias);
            if (biased) {
                snprintf(name, sizeof name, "layers.%lld.%s.bias", (long long)i, SUFFIX[s]);
                l->b[s] = get(st, pre, name, dev);
            }
        }
    }
    if (enkai_safetensors_free(st)) fail("safetensors_free");

    char *dtype;
    if (enkai_tensor_dtype(m.embed, &dtype, &len)) fail("dtype");
    int64_t cap = cap_wanted < m.P ? cap_wanted : m.P;
    char shape[96];
    snprintf(shape, sizeof shape, "[1,%lld,%lld,%lld]", (long long)m.KV, (long long)cap, (long long)m.D);
    for (int64_t i = 0; i < m.L; i++) {
        m.layer[i].k = must(enkai_tensor_zeros(shape, dtype, dev), "zeros");
        m.layer[i].v = must(enkai_tensor_zeros(shape, dtype, dev), "zeros");
    }
    rope_tables(&m, c.theta, cap, dev, dtype);
    enkai_tensor_string_free(dtype);
    return m;
}

/* nn.Linear: x @ w^T + b. */
static int64_t linear(int64_t x, int64_t w, int64_t b) {
    int64_t in[] = {x, w, b};
    return op("linear", in, b ? 3 : 2, NULL);
}

/* --quantize: an fp32 weight [out, in] replaced by its int8 form (ggml's
 * q8_0, or a qint8 scale per output row), which `linear` takes as it is. */
static int64_t quantized(int64_t w, const char *scheme) {
    int64_t q = !strcmp(scheme, "q8_0") ? enkai_quantize_q8_0(w) : enkai_quantize_per_channel(w, 0);
    if (!q) fail("quantize");
    drop(w);
    return q;
}

static void quantize(Model *m, const char *scheme) {
    static const int linears[] = {Q, K, V, O, GATE, UP, DOWN};
    for (int64_t i = 0; i < m->L; i++)
        for (size_t j = 0; j < sizeof linears / sizeof linears[0]; j++)
            m->layer[i].w[linears[j]] = quantized(m->layer[i].w[linears[j]], scheme);
    m->head = quantized(m->head, scheme);
}

static int64_t rms_norm(const Model *m, int64_t x, int64_t w) {
    int64_t in[] = {x, w};
    return op("rms_norm", in, 2, m->rms_kw);
}

/* [1, T, heads * D] -> [1, heads, T, D]; consumes x. */
static int64_t split_heads(const Model *m, int64_t x, int64_t T, int64_t heads) {
    char shape[64];
    snprintf(shape, sizeof shape, "[1,%lld,%lld,%lld]", (long long)T, (long long)heads, (long long)m->D);
    int64_t r = then(x, must(enkai_tensor_reshape(x, shape), "reshape"));
    return then(r, must(enkai_tensor_transpose(r, 1, 2), "transpose"));
}

/* transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, with
 * rotate_half(x) = cat(-x2, x1) = roll(x, D/2) * [-1 .. -1, 1 .. 1]: the
 * sign is folded into `sin_signed`, so the rotation is one roll. */
static int64_t rotate(const Model *m, int64_t x, int64_t cos, int64_t sin_signed) {
    char kw[64];
    snprintf(kw, sizeof kw, "{\"shifts\": %lld, \"dims\": -1}", (long long)(m->D / 2));
    int64_t rolled = op("roll", &x, 1, kw);
    int64_t a = must(enkai_tensor_mul(x, cos), "mul");
    int64_t b = then(rolled, must(enkai_tensor_mul(rolled, sin_signed), "mul"));
    int64_t out = must(enkai_tensor_add(a, b), "add");
    drop(a);
    drop(b);
    return out;
}

/* The positions past..past+T-1 of ids: returns the final hidden state
 * after the last norm, [1, T, C], and leaves the keys and values in the caches. */
static int64_t forward(Model *m, const uint32_t *ids, int64_t T, int64_t past, int64_t dev) {
    int64_t tok = must(enkai_tensor_ids_u32(ids, (size_t)T, 1, T, dev), "ids");
    int64_t h = then(tok, must(enkai_tensor_embedding(m->embed, tok), "embedding"));

    /* The rotary rows of these positions; the sign of rotate_half folded into sin. */
    int64_t cos = narrow(m->cos, 0, past, T), sin = narrow(m->sin, 0, past, T);
    int64_t s1 = narrow(sin, 1, 0, m->D / 2), s2 = narrow(sin, 1, m->D / 2, m->D / 2);
    int64_t neg = then(s1, op("neg", &s1, 1, NULL));
    char list[64];
    snprintf(list, sizeof list, "[%lld,%lld]", (long long)neg, (long long)s2);
    int64_t sin_signed = must(enkai_tensor_concat(list, 1), "concat");
    drop(neg);
    drop(s2);
    drop(sin);

    /* Causal: one pass over a prompt at position 0 is SDPA's is_causal (top-left
     * aligned); later chunks of several tokens need the offset mask; one new
     * token sees the whole cache. */
    int64_t S = past + T, mask = 0;
    if (T > 1 && past > 0) {
        uint8_t *see = malloc((size_t)(T * S));
        if (!see) fail("malloc");
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < S; j++) see[i * S + j] = j <= past + i;
        char shape[64];
        snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)T, (long long)S);
        mask = must(enkai_tensor_from_data(see, (size_t)(T * S), shape, "bool", dev), "from_data");
        free(see);
    }
    char sdpa_kw[96], flat[64];
    snprintf(sdpa_kw, sizeof sdpa_kw, "{\"is_causal\": %s, \"enable_gqa\": %s}", T > 1 && past == 0 ? "true" : "false",
             m->KV != m->H ? "true" : "false");
    snprintf(flat, sizeof flat, "[1,%lld,%lld]", (long long)T, (long long)(m->H * m->D));

    for (int64_t i = 0; i < m->L; i++) {
        Layer *l = &m->layer[i];
        int64_t a = rms_norm(m, h, l->w[IN_NORM]);
        int64_t q = split_heads(m, linear(a, l->w[Q], l->b[Q]), T, m->H);
        int64_t k = split_heads(m, linear(a, l->w[K], l->b[K]), T, m->KV);
        int64_t v = split_heads(m, linear(a, l->w[V], l->b[V]), T, m->KV);
        drop(a);
        q = then(q, rotate(m, q, cos, sin_signed));
        k = then(k, rotate(m, k, cos, sin_signed));
        int64_t keys = cache_put(l->k, k, past, T), values = cache_put(l->v, v, past, T);
        int64_t in[] = {q, keys, values, mask};
        int64_t o = op("scaled_dot_product_attention", in, mask ? 4 : 3, sdpa_kw);
        drop(q);
        drop(keys);
        drop(values);
        o = then(o, must(enkai_tensor_transpose(o, 1, 2), "transpose"));
        o = then(o, must(enkai_tensor_reshape(o, flat), "reshape"));
        o = then(o, linear(o, l->w[O], l->b[O]));
        h = then(h, must(enkai_tensor_add(h, o), "add"));
        drop(o);

        int64_t f = rms_norm(m, h, l->w[POST_NORM]);
        int64_t gate = linear(f, l->w[GATE], l->b[GATE]);
        int64_t up = then(f, linear(f, l->w[UP], l->b[UP]));
        gate = then(gate, op("silu", &gate, 1, NULL));
        int64_t act = must(enkai_tensor_mul(gate, up), "mul");
        drop(gate);
        drop(up);
        int64_t down = then(act, linear(act, l->w[DOWN], l->b[DOWN]));
        h = then(h, must(enkai_tensor_add(h, down), "add"));
        drop(down);
    }
    if (mask) drop(mask);
    drop(cos);
    drop(sin_signed);
    return then(h, rms_norm(m, h, m->norm));
}

/* The resident set size in KiB, from /proc/self/statm (pages); -1 where
 * there is no /proc. */
static long long rss_kb(void) {
    long long size, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void usage(void) {
    fprintf(stderr, "usage: llama_generate MODEL_DIR PROMPT_IDS N_NEW [--topk K] [--topp P] [--temperature T] "
                    "[--seed S] [--device D] [--threads N] [--no-cache] [--print-logits] [--mmap] [--mem-report N] "
                    "[--quantize q8_0|qint8]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 4) usage();
    int topk = 0, want_logits = 0, keep_mapped = 0, no_cache = 0;
    double temperature = 1.0, topp = 0;
    long long seed = 0, threads = 0, mem_every = 0;
    const char *device = "cpu", *scheme = NULL;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--print-logits")) want_logits = 1;
        else if (!strcmp(argv[i], "--mmap")) keep_mapped = 1;
        else if (!strcmp(argv[i], "--no-cache")) no_cache = 1;
        else if (i + 1 >= argc) usage();
        else if (!strcmp(argv[i], "--topk")) topk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--topp")) topp = atof(argv[++i]);
        else if (!strcmp(argv[i], "--temperature")) temperature = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed")) seed = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--device")) device = argv[++i];
        else if (!strcmp(argv[i], "--threads")) threads = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--mem-report")) mem_every = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--quantize")) scheme = argv[++i];
        else usage();
    }
    char *end;
    long n_new = strtol(argv[3], &end, 10);
    if (end == argv[3] || *end || n_new < 0 || !(temperature > 0) || topk < 0 || !(topp >= 0 && topp <= 1) ||
        threads < 0 || mem_every < 0 || (scheme && strcmp(scheme, "q8_0") && strcmp(scheme, "qint8")))
        usage();

    /* Inference only: no graph, no activations kept for a backward. */
    if (enkai_set_grad_enabled(0) < 0) fail("set_grad_enabled");
    if (threads && enkai_set_num_threads(threads)) fail("set_num_threads");
    if (enkai_tensor_manual_seed(seed)) fail("manual_seed");
    int64_t dev = must(enkai_tensor_device(device), "device");
    copy_weights = !keep_mapped && !strcmp(device, "cpu");

    /* The ids first (the cache's size depends on them), checked against the
     * vocabulary once the config is read. */
    size_t T = 1;
    for (const char *p = argv[2]; *p; p++) T += *p == ',';
    Model m = load(argv[1], (int64_t)(T + (size_t)n_new), dev);
    uint32_t *ids = parse_ids(argv[2], m.V, (size_t)n_new, &T);
    if (scheme) {
        /* The int8 products give fp32 results: the rest of the model must be fp32 too. */
        char *dt = NULL;
        size_t dl = 0;
        if (enkai_tensor_dtype(m.norm, &dt, &dl)) fail("dtype");
        if (strcmp(dt, "fp32")) {
            fprintf(stderr, "E_INVALID_ARG: --quantize needs an fp32 model, this one is %s\n", dt);
            return 1;
        }
        enkai_tensor_string_free(dt);
        quantize(&m, scheme);
    }
    if ((int64_t)(T + (size_t)n_new) > m.P) {
        fprintf(stderr, "E_INVALID_ARG: %zu prompt + %ld new tokens exceed max_position_embeddings %lld\n", T, n_new,
                (long long)m.P);
        return 1;
    }

    double t0 = now(), t1 = t0;
    size_t len = T, total = T + (size_t)n_new;
    int64_t h = forward(&m, ids, (int64_t)T, 0, dev);
    if (want_logits) {
        int64_t all = linear(h, m.head, 0);
        print_logits(all, (int64_t)T, m.V);
        drop(all);
    }
    while (len < total) {
        int64_t last = then(h, op("select", &h, 1, "{\"dim\": 1, \"index\": -1}"));
        int64_t logits = then(last, linear(last, m.head, 0));
        ids[len++] = pick(logits, topk, topp, temperature);
        drop(logits);
        if (len == T + 1) t1 = now();
        if (mem_every && (len - T) % (size_t)mem_every == 0)
            fprintf(stderr, "mem: tokens %zu live_tensors %lld rss_kb %lld\n", len - T,
                    (long long)enkai_tensor_live_tensors(), rss_kb());
        if (len == total) h = 0;
        else if (no_cache) h = forward(&m, ids, (int64_t)len, 0, dev);
        else h = forward(&m, ids + len - 1, 1, (int64_t)len - 1, dev);
    }
    if (h) drop(h);
    double t2 = now();

    for (size_t i = T; i < len; i++) printf("%u%s", ids[i], i + 1 < len ? "," : "");
    printf("\n");
    fprintf(stderr, "%zu prompt tokens, first new token after %.1f ms; %zu new tokens in %.3f s: %.1f tokens/s "
                    "(%.1f after the first)\n",
            T, 1e3 * (t1 - t0), len - T, t2 - t0, (double)(len - T) / (t2 - t0),
            len - T > 1 ? (double)(len - T - 1) / (t2 - t1) : 0.0);

    free(ids);
    int64_t top[] = {m.embed, m.norm, m.head, m.cos, m.sin};
    for (size_t i = 0; i < 5; i++) drop(top[i]);
    for (int64_t i = 0; i < m.L; i++) {
        Layer *l = &m.layer[i];
        for (int s = 0; s < WEIGHTS; s++) {
            drop(l->w[s]);
            if (l->b[s]) drop(l->b[s]);
        }
        drop(l->k);
        drop(l->v);
    }
    free(m.layer);
    if (enkai_tensor_device_free(dev)) fail("device_free");
    if (enkai_tensor_live_tensors() || enkai_tensor_live_safetensors()) {
        fprintf(stderr, "leak: %lld tensors, %lld safetensors files still live\n",
                (long long)enkai_tensor_live_tensors(), (long long)enkai_tensor_live_safetensors());
        return 1;
    }
    return 0;
}
