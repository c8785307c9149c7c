/* gpt2_generate: loads a Hugging Face GPT-2 checkpoint (config.json and
 * model.safetensors, as transformers' save_pretrained writes them) and
 * generates tokens with a KV cache: the prompt in one pass, then one token
 * per step. The cache is allocated once per layer at the length the run
 * needs, and each step writes its keys and values into it in place. Greedy
 * by default, or sampling: top-k, top-p (nucleus) or both.
 *
 *   gpt2_generate MODEL_DIR PROMPT_IDS N_NEW [--topk K] [--topp P]
 *                 [--temperature T] [--seed S] [--device D] [--print-logits] [--mmap]
 *
 * PROMPT_IDS is comma-separated ("464,3290,318"). Prints the new token ids
 * on one line, comma-separated (after the prompt's logits, one position per
 * line, with --print-logits). Tokens/s go to stderr. The backend is the
 * library's default or ENKAI_BACKEND (torch, cpu). The test suite checks
 * the tokens and logits against transformers.
 * Build: make build/examples/gpt2_generate */
#include "hf_common.h"

/* ---- config.json ---- */

typedef struct {
    double n_embd, n_head, n_layer, n_positions, vocab_size, eps;
    char activation[32];
    int inverse_layer_idx, upcast;
} Config;

static Config read_config(const char *path) {
    /* transformers' GPT2Config defaults for the keys a file may leave out. */
    Config c = {.n_embd = 768, .n_head = 12, .n_layer = 12, .n_positions = 1024, .vocab_size = 50257, .eps = 1e-5,
                .activation = "gelu_new"};
    ConfigKey keys[] = {
        {"n_embd", .num = &c.n_embd}, {"n_head", .num = &c.n_head}, {"n_layer", .num = &c.n_layer}, {"n_positions", .num = &c.n_positions},
        {"vocab_size", .num = &c.vocab_size}, {"layer_norm_epsilon", .num = &c.eps},
        {"activation_function", .str = c.activation, .str_cap = sizeof c.activation},
        {"scale_attn_by_inverse_layer_idx", .flag = &c.inverse_layer_idx},
        {"reorder_and_upcast_attn", .flag = &c.upcast}};
    read_config_keys(path, keys, sizeof keys / sizeof keys[0]);
    double ints[] = {c.n_embd, c.n_head, c.n_layer, c.n_positions, c.vocab_size};
    for (size_t i = 0; i < 5; i++)
        if (!whole(ints[i], 1, 1e7)) config_fail(path, "a size is not a positive integer");
    if ((int64_t)c.n_embd % (int64_t)c.n_head) config_fail(path, "n_embd is not a multiple of n_head");
    if (!(c.eps > 0)) config_fail(path, "layer_norm_epsilon is not positive");
    /* Variants this program does not implement: refused, never run wrong. */
    if (strcmp(c.activation, "gelu_new") || c.inverse_layer_idx || c.upcast) {
        fprintf(stderr, "E_UNSUPPORTED: %s: only activation gelu_new, without scale_attn_by_inverse_layer_idx "
                        "or reorder_and_upcast_attn\n", path);
        exit(1);
    }
    return c;
}

/* ---- the model ---- */

typedef struct {
    int64_t ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b;
    int64_t k, v; /* the cache: [1, heads, capacity, head_dim] (cache_put) */
} Layer;

typedef struct {
    int64_t C, H, L, P, V;
    double eps;
    int64_t wte, wpe, lnf_w, lnf_b, wte_t;
    Layer *layer;
} Model;

/* A Conv1D weight [in, out] copied as [out, in] (each output's weights one
 * contiguous row) and returned as its [in, out] transpose: the same tensor
 * to `enkai_tensor_linear`, which then takes a dot product per output row.
 * A batch-1 step of the native backend reads such a weight as four
 * sequential streams; the input-major layout it reads a few adjacent rows
 * at a time, accumulating each output column. GPT-2-small on the native
 * backend at 1 thread: 30.8-34.1 tokens/s so, against 24.0-28.4 with the
 * file's layout (three alternating runs each; the same tokens). Only when
 * the weights are copied anyway (not --mmap), in place of that copy. */
static int64_t out_major(int64_t w) {
    int64_t t = must(enkai_tensor_transpose(w, 0, 1), "transpose");
    drop(w);
    int64_t c = then(t, op("contiguous", &t, 1, NULL));
    return then(c, must(enkai_tensor_transpose(c, 0, 1), "transpose"));
}

static Model load(const char *dir, int64_t dev) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    Config c = read_config(path);
    Model m = {(int64_t)c.n_embd, (int64_t)c.n_head, (int64_t)c.n_layer, (int64_t)c.n_positions,
               (int64_t)c.vocab_size, c.eps, 0, 0, 0, 0, 0, NULL};

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int64_t st = must(enkai_safetensors_open(path), "safetensors_open");
    /* GPT2LMHeadModel saves its body under "transformer."; a bare GPT2Model does not. */
    char *names;
    size_t len;
    if (enkai_safetensors_names(st, &names, &len)) fail("safetensors_names");
    const char *pre = strstr(names, "\"transformer.wte.weight\"") ? "transformer." : "";
    enkai_tensor_string_free(names);

    m.wte = get(st, pre, "wte.weight", dev);
    m.wpe = get(st, pre, "wpe.weight", dev);
    m.lnf_w = get(st, pre, "ln_f.weight", dev);
    m.lnf_b = get(st, pre, "ln_f.bias", dev);
    /* lm_head is tied to wte: logits = h @ wte^T, a view, no copy. */
    m.wte_t = must(enkai_tensor_transpose(m.wte, 0, 1), "transpose");
    m.layer = calloc((size_t)m.L, sizeof *m.layer);
    if (!m.layer) fail("calloc");
    for (int64_t i = 0; i < m.L; i++) {
        Layer *l = &m.layer[i];
        /* Conv1D stores its weight [in, out], the layout enkai_tensor_linear takes. */
        const char *suffix[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        int64_t *slot[] = {&l->ln1_w, &l->ln1_b, &l->attn_w, &l->attn_b, &l->proj_w, &l->proj_b,
                           &l->ln2_w, &l->ln2_b, &l->fc_w, &l->fc_b, &l->out_w, &l->out_b};
        for (size_t s = 0; s < 12; s++) {
            char name[128];
            snprintf(name, sizeof name, "h.%lld.%s", (long long)i, suffix[s]);
            int conv1d = s == 2 || s == 4 || s == 8 || s == 10;
            /* out_major makes the copy itself: one copy, not a clone and then another. */
            *slot[s] = copy_weights && conv1d ? out_major(get_view(st, pre, name, dev)) : get(st, pre, name, dev);
        }
    }
    /* Every tensor holds its own mapping of the file: the handle can go now. */
    if (enkai_safetensors_free(st)) fail("safetensors_free");
    return m;
}

/* [1, T, C] -> [1, H, T, C/H] */
static int64_t heads(const Model *m, int64_t x, int64_t T) {
    char shape[64];
    snprintf(shape, sizeof shape, "[1,%lld,%lld,%lld]", (long long)T, (long long)m->H, (long long)(m->C / m->H));
    int64_t r = must(enkai_tensor_reshape(x, shape), "reshape");
    return then(r, must(enkai_tensor_transpose(r, 1, 2), "transpose"));
}

/* Allocates every layer's key and value caches for `cap` positions, in the weights' dtype. */
static void alloc_caches(Model *m, int64_t cap, int64_t dev) {
    char *dtype;
    size_t len;
    if (enkai_tensor_dtype(m->wte, &dtype, &len)) fail("dtype");
    char shape[96];
    snprintf(shape, sizeof shape, "[1,%lld,%lld,%lld]", (long long)m->H, (long long)cap, (long long)(m->C / m->H));
    for (int64_t i = 0; i < m->L; i++) {
        m->layer[i].k = must(enkai_tensor_zeros(shape, dtype, dev), "zeros");
        m->layer[i].v = must(enkai_tensor_zeros(shape, dtype, dev), "zeros");
    }
    enkai_tensor_string_free(dtype);
}

/* The positions past..past+T-1 of ids [1, T]: returns the final hidden state
 * after ln_f, [1, T, C], and leaves the keys and values in the caches. */
static int64_t forward(Model *m, const uint32_t *ids, int64_t T, int64_t past, int64_t dev) {
    uint32_t *pos = malloc((size_t)T * sizeof *pos);
    if (!pos) fail("malloc");
    for (int64_t t = 0; t < T; t++) pos[t] = (uint32_t)(past + t);
    int64_t tok = must(enkai_tensor_ids_u32(ids, (size_t)T, 1, T, dev), "ids");
    int64_t at = must(enkai_tensor_ids_u32(pos, (size_t)T, 1, T, dev), "ids");
    free(pos);
    int64_t te = must(enkai_tensor_embedding(m->wte, tok), "embedding");
    int64_t pe = must(enkai_tensor_embedding(m->wpe, at), "embedding");
    int64_t h = must(enkai_tensor_add(te, pe), "add");
    int64_t done[] = {tok, at, te, pe};
    for (size_t i = 0; i < 4; i++) drop(done[i]);

    /* A query at position past+i sees keys 0..past+i: mask the later ones.
     * One new token sees the whole cache: no mask. */
    int64_t S = past + T, mask = 0;
    if (T > 1) {
        uint8_t *hide = malloc((size_t)(T * S));
        if (!hide) fail("malloc");
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < S; j++) hide[i * S + j] = j > past + i;
        char shape[64];
        snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)T, (long long)S);
        mask = must(enkai_tensor_from_data(hide, (size_t)(T * S), shape, "bool", dev), "from_data");
        free(hide);
    }
    char scale[64], flat[64];
    snprintf(scale, sizeof scale, "{\"other\": %.17g}", 1.0 / sqrt((double)(m->C / m->H)));
    snprintf(flat, sizeof flat, "[1,%lld,%lld]", (long long)T, (long long)m->C);

    for (int64_t i = 0; i < m->L; i++) {
        Layer *l = &m->layer[i];
        int64_t a = must(enkai_tensor_layernorm(h, l->ln1_w, l->ln1_b, m->eps), "layernorm");
        int64_t qkv = then(a, must(enkai_tensor_linear(a, l->attn_w, l->attn_b), "linear"));
        int64_t q = must(enkai_tensor_slice(qkv, -1, 0, m->C, 1), "slice");
        int64_t k = must(enkai_tensor_slice(qkv, -1, m->C, 2 * m->C, 1), "slice");
        int64_t v = must(enkai_tensor_slice(qkv, -1, 2 * m->C, 3 * m->C, 1), "slice");
        drop(qkv);
        q = then(q, heads(m, q, T));
        int64_t keys = cache_put(l->k, heads(m, k, T), past, T);
        int64_t values = cache_put(l->v, heads(m, v, T), past, T);
        drop(k);
        drop(v);

        int64_t kt = then(keys, must(enkai_tensor_transpose(keys, -2, -1), "transpose"));
        int64_t s = must(enkai_tensor_matmul(q, kt), "matmul");
        drop(kt);
        drop(q);
        s = then(s, op("mul", &s, 1, scale));
        if (mask) s = then(s, op("masked_fill", (int64_t[]){s, mask}, 2, "{\"value\": -Infinity}"));
        s = then(s, must(enkai_tensor_softmax(s, -1), "softmax"));
        int64_t o = then(s, must(enkai_tensor_matmul(s, values), "matmul"));
        drop(values);
        o = then(o, must(enkai_tensor_transpose(o, 1, 2), "transpose"));
        o = then(o, must(enkai_tensor_reshape(o, flat), "reshape"));
        o = then(o, must(enkai_tensor_linear(o, l->proj_w, l->proj_b), "linear"));
        h = then(h, must(enkai_tensor_add(h, o), "add"));
        drop(o);

        int64_t f = must(enkai_tensor_layernorm(h, l->ln2_w, l->ln2_b, m->eps), "layernorm");
        f = then(f, must(enkai_tensor_linear(f, l->fc_w, l->fc_b), "linear"));
        f = then(f, op("gelu", &f, 1, "{\"approximate\": \"tanh\"}")); /* gelu_new */
        f = then(f, must(enkai_tensor_linear(f, l->out_w, l->out_b), "linear"));
        h = then(h, must(enkai_tensor_add(h, f), "add"));
        drop(f);
    }
    if (mask) drop(mask);
    return then(h, must(enkai_tensor_layernorm(h, m->lnf_w, m->lnf_b, m->eps), "layernorm"));
}

static void usage(void) {
    fprintf(stderr, "usage: gpt2_generate MODEL_DIR PROMPT_IDS N_NEW [--topk K] [--topp P] [--temperature T] "
                    "[--seed S] [--device D] [--print-logits] [--mmap]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 4) usage();
    int topk = 0, want_logits = 0, keep_mapped = 0;
    double temperature = 1.0, topp = 0;
    long long seed = 0;
    const char *device = "cpu";
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--print-logits")) want_logits = 1;
        else if (!strcmp(argv[i], "--mmap")) keep_mapped = 1;
        else if (i + 1 >= argc) usage();
        else if (!strcmp(argv[i], "--topk")) topk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--topp")) topp = atof(argv[++i]);
        else if (!strcmp(argv[i], "--temperature")) temperature = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed")) seed = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--device")) device = argv[++i];
        else usage();
    }
    char *end;
    long n_new = strtol(argv[3], &end, 10);
    if (end == argv[3] || *end || n_new < 0 || !(temperature > 0) || topk < 0 || !(topp >= 0 && topp <= 1))
        usage();

    /* Inference only: no graph, no activations kept for a backward. */
    if (enkai_set_grad_enabled(0) < 0) fail("set_grad_enabled");
    if (enkai_tensor_manual_seed(seed)) fail("manual_seed");
    int64_t dev = must(enkai_tensor_device(device), "device");
    copy_weights = !keep_mapped && !strcmp(device, "cpu");
    Model m = load(argv[1], dev);

    size_t T;
    uint32_t *ids = parse_ids(argv[2], m.V, (size_t)n_new, &T);
    if ((int64_t)(T + (size_t)n_new) > m.P) {
        fprintf(stderr, "E_INVALID_ARG: %zu prompt + %ld new tokens exceed n_positions %lld\n", T, n_new,
                (long long)m.P);
        return 1;
    }

    alloc_caches(&m, (int64_t)(T + (size_t)n_new), dev);

    /* The prompt in one pass; then each new token alone, over the cache. */
    double t0 = now(), t1 = t0;
    size_t len = T, total = T + (size_t)n_new;
    int64_t h = forward(&m, ids, (int64_t)T, 0, dev);
    if (want_logits) {
        int64_t all = must(enkai_tensor_matmul(h, m.wte_t), "matmul");
        print_logits(all, (int64_t)T, m.V);
        drop(all);
    }
    while (len < total) {
        int64_t last = then(h, op("select", &h, 1, "{\"dim\": 1, \"index\": -1}"));
        int64_t logits = then(last, must(enkai_tensor_matmul(last, m.wte_t), "matmul"));
        ids[len++] = pick(logits, topk, topp, temperature);
        drop(logits);
        if (len == T + 1) t1 = now();
        h = len < total ? forward(&m, ids + len - 1, 1, (int64_t)len - 1, dev) : 0;
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
    int64_t top[] = {m.wte, m.wpe, m.lnf_w, m.lnf_b, m.wte_t};
    for (size_t i = 0; i < 5; i++) drop(top[i]);
    for (int64_t i = 0; i < m.L; i++) {
        Layer *l = &m.layer[i];
        int64_t all[] = {l->ln1_w, l->ln1_b, l->attn_w, l->attn_b, l->proj_w, l->proj_b, l->ln2_w,
                         l->ln2_b,  l->fc_w,  l->fc_b,    l->out_w,  l->out_b,  l->k,      l->v};
        for (size_t s = 0; s < 14; s++)
            if (all[s]) drop(all[s]);
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
