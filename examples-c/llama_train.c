/* llama_train: a small Llama trained from C on the demo's text, byte by
 * byte (vocabulary 256), then saved as a Hugging Face LlamaForCausalLM
 * directory that llama_generate (and transformers' from_pretrained) load.
 *
 *   llama_train [--steps N] [--batch B] [--seq T] [--lr LR] [--weight-decay WD]
 *               [--seed S] [--init DIR] [--out DIR] [--device D] [--threads N]
 *               [--checkpoint 0|1]
 *
 * The model is llama_generate's, with a batch: RMSNorm (`rms_norm`) ->
 * q/k/v projections -> rotary embeddings (transformers' rotate-half form)
 * -> grouped-query `scaled_dot_product_attention` (is_causal, enable_gqa)
 * -> o_proj, then a SwiGLU MLP (`silu(gate) * up` -> down), the final norm
 * and an untied lm_head. Default size: hidden 64, 2 layers, 4 query heads
 * over 2 key/value heads (head_dim 16), intermediate 128, rope_theta 10000.
 * The weights start as transformers initialises LlamaForCausalLM (normal,
 * std 0.02, from the library's generator seeded with --seed; norms ones),
 * or from the checkpoint in --init DIR (config.json + model.safetensors,
 * its sizes replacing the defaults).
 *
 * Training: AdamW (betas 0.9, 0.999, eps 1e-8) on the mean next-byte
 * cross_entropy of B windows of T bytes per step. The windows are a fixed
 * formula, so a test can replay the data order without an RNG: window b of
 * step s starts at byte ((s * B + b) * 97) % (len(TEXT) - T), its targets
 * one byte later. One line per step on stdout: "step S loss L". With
 * --checkpoint 1 every decoder layer is a checkpointed span
 * (enkai_grad_checkpoint, as torch.utils.checkpoint): its activations are
 * dropped after the forward pass and recomputed in the backward, for the
 * same gradients in less memory. The run ends with its time and the
 * process's peak resident set on stderr.
 *
 * --out DIR writes config.json and model.safetensors under transformers'
 * names (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
 * ..., lm_head.weight). Every handle is freed: the program fails if any
 * tensor or optimizer is still live at exit.
 * Build: make build/examples/llama_train */
#include "hf_common.h"
#include "llama_config.h"
#include <errno.h>
#include <sys/stat.h>

/* train_tinylm's (and lstm_lm's) demo text. */
static const char *TEXT =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. ";


/* The default model: small enough to train in seconds on a CPU core, with
 * grouped-query attention (2 query heads per key/value head), and room for
 * a prompt and 500 generated tokens in llama_generate. */
static Config default_config(void) {
    return (Config){.hidden = 64, .inter = 128, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16,
                    .vocab = 256, .positions = 1024, .eps = 1e-6, .theta = 10000, .act = "silu",
                    .rope_type = "default"};
}

/* config.json of an --init checkpoint, as llama_generate reads it, with
 * LlamaConfig's defaults for absent keys; variants this program does not
 * train (biases, a tied head, other activations or rope types) are refused. */
static Config read_config(const char *path) {
    Config c = llama_read_config(path);
    if (strcmp(c.act, "silu") || c.rope_scaling || strcmp(c.rope_type, "default") || c.tied || c.attn_bias ||
        c.mlp_bias || c.vocab < 256) {
        fprintf(stderr, "E_UNSUPPORTED: %s: llama_train trains hidden_act silu, the default rope_type, an untied "
                        "head, no biases, and a vocabulary of at least the 256 bytes\n", path);
        exit(1);
    }
    return c;
}

/* ---- parameters, in transformers' state_dict order ---- */

enum { IN_NORM, Q, K, V, O, POST_NORM, GATE, UP, DOWN, PER_LAYER };
static const char *const SUFFIX[PER_LAYER] = {
    "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

typedef struct {
    int64_t C, I, H, KV, D, L, V, P;
    double eps, theta;
    int64_t n;         /* parameters: embed, L * PER_LAYER, norm, head */
    int64_t *p;        /* their handles */
    char (*name)[96];  /* their transformers names */
    char rms_kw[96];
} Model;

#define EMBED(m) ((m)->p[0])
#define W(m, l, s) ((m)->p[1 + (l) * PER_LAYER + (s)])
#define NORM(m) ((m)->p[1 + (m)->L * PER_LAYER])
#define HEAD(m) ((m)->p[2 + (m)->L * PER_LAYER])

static Model model_of(Config c) {
    Model m = {.C = (int64_t)c.hidden, .I = (int64_t)c.inter, .H = (int64_t)c.heads, .KV = (int64_t)c.kv_heads,
               .D = (int64_t)c.head_dim, .L = (int64_t)c.layers, .V = (int64_t)c.vocab,
               .P = (int64_t)c.positions, .eps = c.eps, .theta = c.theta};
    m.n = 3 + m.L * PER_LAYER;
    m.p = calloc((size_t)m.n, sizeof *m.p);
    m.name = calloc((size_t)m.n, sizeof *m.name);
    if (!m.p || !m.name) fail("calloc");
    snprintf(m.name[0], sizeof m.name[0], "model.embed_tokens.weight");
    for (int64_t l = 0; l < m.L; l++)
        for (int s = 0; s < PER_LAYER; s++)
            snprintf(m.name[1 + l * PER_LAYER + s], sizeof m.name[0], "model.layers.%lld.%s.weight", (long long)l,
                     SUFFIX[s]);
    snprintf(m.name[m.n - 2], sizeof m.name[0], "model.norm.weight");
    snprintf(m.name[m.n - 1], sizeof m.name[0], "lm_head.weight");
    snprintf(m.rms_kw, sizeof m.rms_kw, "{\"normalized_shape\": [%lld], \"eps\": %.17g}", (long long)m.C, m.eps);
    return m;
}

/* Each parameter's shape as nn.Linear / nn.Embedding / LlamaRMSNorm keep it. */
static void shape_of(const Model *m, int64_t i, char *out, size_t cap) {
    long long rows = m->C, cols = 0;
    if (i == 0 || i == m->n - 1) rows = m->V, cols = m->C;
    else if (i < m->n - 2) {
        switch ((i - 1) % PER_LAYER) {
        case Q: rows = m->H * m->D, cols = m->C; break;
        case K: case V: rows = m->KV * m->D, cols = m->C; break;
        case O: rows = m->C, cols = m->H * m->D; break;
        case GATE: case UP: rows = m->I, cols = m->C; break;
        case DOWN: rows = m->C, cols = m->I; break;
        default: break; /* the norms */
        }
    }
    if (cols) snprintf(out, cap, "[%lld,%lld]", rows, cols);
    else snprintf(out, cap, "[%lld]", rows);
}

static int is_norm(const Model *m, int64_t i) {
    if (i == m->n - 2) return 1;
    if (i == 0 || i == m->n - 1) return 0;
    return (i - 1) % PER_LAYER == IN_NORM || (i - 1) % PER_LAYER == POST_NORM;
}

/* LlamaPreTrainedModel._init_weights: Linear and Embedding weights normal(0,
 * initializer_range 0.02), RMSNorm weights ones; drawn in state_dict order
 * from the library's generator. */
static void init_random(Model *m, int64_t dev) {
    for (int64_t i = 0; i < m->n; i++) {
        char shape[64];
        shape_of(m, i, shape, sizeof shape);
        if (is_norm(m, i)) {
            m->p[i] = must(enkai_tensor_ones(shape, "fp32", dev), "ones");
        } else {
            int64_t r = must(enkai_tensor_randn(shape, "fp32", dev), "randn");
            m->p[i] = then(r, op("mul", &r, 1, "{\"other\": 0.02}"));
        }
    }
}

/* The weights of an HF checkpoint, as fp32 tensors of the shapes the config implies. */
static void init_from(Model *m, const char *dir, int64_t dev) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int64_t st = must(enkai_safetensors_open(path), "safetensors_open");
    for (int64_t i = 0; i < m->n; i++) {
        int64_t t = must(enkai_safetensors_get(st, m->name[i], dev), m->name[i]);
        char want[64];
        shape_of(m, i, want, sizeof want);
        EnkaiSlice got = enkai_tensor_shape(t);
        if (!got.ptr) fail("shape");
        int same = got.len == strlen(want) && !memcmp(got.ptr, want, got.len);
        enkai_free(got.ptr, got.len);
        if (!same) {
            fprintf(stderr, "E_SHAPE: %s: %s is not %s as config.json implies\n", path, m->name[i], want);
            exit(1);
        }
        /* Trained in fp32 whatever the file holds. The tensor maps the file
         * copy-on-write: AdamW's in-place steps never reach the file, so
         * --out may name the --init directory. */
        m->p[i] = then(t, must(enkai_tensor_to_dtype(t, "fp32"), "to_dtype"));
    }
    if (enkai_safetensors_free(st)) fail("safetensors_free");
}

/* ---- the forward, as llama_generate's with a batch ---- */

/* x [B, T, heads * D] -> [B, heads, T, D]; consumes x. */
static int64_t split_heads(const Model *m, int64_t x, int64_t B, int64_t T, int64_t heads) {
    char shape[96];
    snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]", (long long)B, (long long)T, (long long)heads,
             (long long)m->D);
    int64_t r = then(x, must(enkai_tensor_reshape(x, shape), "reshape"));
    return then(r, must(enkai_tensor_transpose(r, 1, 2), "transpose"));
}

static int64_t linear(int64_t x, int64_t w) {
    int64_t in[] = {x, w};
    return op("linear", in, 2, NULL);
}

static int64_t rms_norm(const Model *m, int64_t x, int64_t w) {
    int64_t in[] = {x, w};
    return op("rms_norm", in, 2, m->rms_kw);
}

/* transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, with
 * rotate_half(x) = cat(-x2, x1) = roll(x, D/2) * [-1 .. -1, 1 .. 1], the
 * sign folded into sin_signed (llama_generate's form). */
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

/* The rotary tables of positions 0..T-1, [T, D], as LlamaRotaryEmbedding
 * makes them in fp32 (inv_freq_i = 1 / theta^(2i/D), the angles over both
 * halves of the head); the sine with rotate_half's sign folded in. */
static void rope_tables(const Model *m, int64_t T, int64_t dev, int64_t *cos_out, int64_t *sin_out) {
    size_t n = (size_t)(T * m->D);
    float *c = malloc(n * sizeof *c), *s = malloc(n * sizeof *s);
    if (!c || !s) fail("malloc");
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < m->D / 2; i++) {
            float inv = 1.0f / powf((float)m->theta, (float)(2 * i) / (float)m->D);
            float a = (float)p * inv;
            c[p * m->D + i] = c[p * m->D + i + m->D / 2] = cosf(a);
            s[p * m->D + i] = -sinf(a);
            s[p * m->D + i + m->D / 2] = sinf(a);
        }
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)T, (long long)m->D);
    *cos_out = must(enkai_tensor_from_data(c, n * sizeof *c, shape, "fp32", dev), "from_data");
    *sin_out = must(enkai_tensor_from_data(s, n * sizeof *s, shape, "fp32", dev), "from_data");
    free(c);
    free(s);
}

/* What one decoder layer reads besides its input: the span context of
 * --checkpoint, kept until the backward pass has recomputed the layer. */
typedef struct {
    const Model *m;
    int64_t l, B, T, cos, sin_signed;
    char sdpa_kw[96], flat[64];
} Layer;

/* Decoder layer l on the hidden state h [B, T, hidden]: a new handle. */
static int64_t layer(const Layer *c, int64_t h) {
    const Model *m = c->m;
    int64_t l = c->l, B = c->B, T = c->T;
    int64_t a = rms_norm(m, h, W(m, l, IN_NORM));
    int64_t q = split_heads(m, linear(a, W(m, l, Q)), B, T, m->H);
    int64_t k = split_heads(m, linear(a, W(m, l, K)), B, T, m->KV);
    int64_t v = split_heads(m, linear(a, W(m, l, V)), B, T, m->KV);
    drop(a);
    q = then(q, rotate(m, q, c->cos, c->sin_signed));
    k = then(k, rotate(m, k, c->cos, c->sin_signed));
    int64_t in[] = {q, k, v};
    int64_t o = op("scaled_dot_product_attention", in, 3, c->sdpa_kw);
    drop(q);
    drop(k);
    drop(v);
    o = then(o, must(enkai_tensor_transpose(o, 1, 2), "transpose"));
    o = then(o, must(enkai_tensor_reshape(o, c->flat), "reshape"));
    o = then(o, linear(o, W(m, l, O)));
    int64_t r = must(enkai_tensor_add(h, o), "add");
    drop(o);

    int64_t f = rms_norm(m, r, W(m, l, POST_NORM));
    int64_t gate = linear(f, W(m, l, GATE));
    int64_t up = then(f, linear(f, W(m, l, UP)));
    gate = then(gate, op("silu", &gate, 1, NULL));
    int64_t act = must(enkai_tensor_mul(gate, up), "mul");
    drop(gate);
    drop(up);
    int64_t down = then(act, linear(act, W(m, l, DOWN)));
    r = then(r, must(enkai_tensor_add(r, down), "add"));
    drop(down);
    return r;
}

/* The layer as a checkpointed span's function (enkai_grad_checkpoint). */
static int64_t layer_span(void *ctx, const int64_t *in, size_t n, int64_t *out, size_t cap) {
    if (n != 1 || cap < 1) return -1;
    out[0] = layer(ctx, in[0]);
    return 1;
}

/* Logits [B * T, V] of ids [B, T], recorded for the backward; with
 * `spans` (one Layer per layer), each layer is a checkpointed span. */
static int64_t forward(const Model *m, int64_t ids, int64_t B, int64_t T, int64_t cos, int64_t sin_signed, Layer *spans) {
    int64_t h = must(enkai_tensor_embedding(EMBED(m), ids), "embedding");
    char rows[64];
    snprintf(rows, sizeof rows, "[%lld,%lld]", (long long)(B * T), (long long)m->V);
    Layer one;
    for (int64_t l = 0; l < m->L; l++) {
        Layer *c = spans ? &spans[l] : &one;
        *c = (Layer){.m = m, .l = l, .B = B, .T = T, .cos = cos, .sin_signed = sin_signed};
        snprintf(c->sdpa_kw, sizeof c->sdpa_kw, "{\"is_causal\": true, \"enable_gqa\": %s}",
                 m->KV != m->H ? "true" : "false");
        snprintf(c->flat, sizeof c->flat, "[%lld,%lld,%lld]", (long long)B, (long long)T, (long long)(m->H * m->D));
        int64_t next;
        if (spans) {
            if (enkai_grad_checkpoint(layer_span, NULL, c, &h, 1, &next, 1) != 1) fail("grad_checkpoint");
        } else {
            next = layer(c, h);
        }
        h = then(h, next);
    }
    h = then(h, rms_norm(m, h, NORM(m)));
    h = then(h, linear(h, HEAD(m)));
    return then(h, must(enkai_tensor_reshape(h, rows), "reshape"));
}

/* The process's peak resident set (VmHWM), in KiB; -1 where unknown. */
static long peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

/* ---- the output directory ---- */

static void save(const Model *m, const char *dir) {
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "E_CKPT_IO: cannot create %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "E_CKPT_IO: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    /* LlamaConfig's fields (and transformers' bookkeeping ones); no bos/eos,
     * so generation runs exactly as many tokens as asked. */
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
            "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
            "  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n"
            "  \"vocab_size\": %lld,\n  \"max_position_embeddings\": %lld,\n  \"rope_theta\": %.17g,\n"
            "  \"rms_norm_eps\": %.17g,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
            "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"attention_dropout\": 0.0,\n"
            "  \"initializer_range\": 0.02,\n  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n"
            "  \"pad_token_id\": null,\n  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
            (long long)m->C, (long long)m->I, (long long)m->L, (long long)m->H, (long long)m->KV, (long long)m->D,
            (long long)m->V, (long long)m->P, m->theta, m->eps);
    if (fclose(f)) {
        fprintf(stderr, "E_CKPT_IO: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    size_t cap = (size_t)m->n * 128 + 16;
    char *names = malloc(cap), *handles = malloc(cap);
    if (!names || !handles) fail("malloc");
    size_t a = (size_t)snprintf(names, cap, "["), b = (size_t)snprintf(handles, cap, "[");
    for (int64_t i = 0; i < m->n; i++) {
        a += (size_t)snprintf(names + a, cap - a, "%s\"%s\"", i ? "," : "", m->name[i]);
        b += (size_t)snprintf(handles + b, cap - b, "%s%lld", i ? "," : "", (long long)m->p[i]);
    }
    snprintf(names + a, cap - a, "]");
    snprintf(handles + b, cap - b, "]");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    /* transformers' save_pretrained marks its files {"format": "pt"}. */
    if (enkai_safetensors_save(path, names, handles, "{\"format\": \"pt\"}")) fail("safetensors_save");
    free(names);
    free(handles);
}

static void usage(void) {
    fprintf(stderr, "usage: llama_train [--steps N] [--batch B] [--seq T] [--lr LR] [--weight-decay WD] [--seed S] "
                    "[--init DIR] [--out DIR] [--device D] [--threads N] [--checkpoint 0|1]\n");
    exit(2);
}

static long long int_arg(const char *s, long long lo, long long hi) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) usage();
    return v;
}

static double real_arg(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < 0) usage();
    return v;
}

int main(int argc, char **argv) {
    long long steps = 200, B = 8, T = 32, seed = 0, threads = 0;
    double lr = 1e-2, wd = 0.01;
    const char *init = NULL, *out = NULL, *device = "cpu";
    long long checkpoint = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        else if (!strcmp(argv[i], "--steps")) steps = int_arg(argv[++i], 0, 1000000000);
        else if (!strcmp(argv[i], "--batch")) B = int_arg(argv[++i], 1, 1 << 20);
        else if (!strcmp(argv[i], "--seq")) T = int_arg(argv[++i], 1, 1 << 20);
        else if (!strcmp(argv[i], "--lr")) lr = real_arg(argv[++i]);
        else if (!strcmp(argv[i], "--weight-decay")) wd = real_arg(argv[++i]);
        else if (!strcmp(argv[i], "--seed")) seed = int_arg(argv[++i], 0, INT64_MAX);
        else if (!strcmp(argv[i], "--threads")) threads = int_arg(argv[++i], 0, 1 << 20);
        else if (!strcmp(argv[i], "--init")) init = argv[++i];
        else if (!strcmp(argv[i], "--out")) out = argv[++i];
        else if (!strcmp(argv[i], "--device")) device = argv[++i];
        else if (!strcmp(argv[i], "--checkpoint")) checkpoint = int_arg(argv[++i], 0, 1);
        else usage();
    }
    const long long n_text = (long long)strlen(TEXT);
    if (T >= n_text) {
        fprintf(stderr, "E_INVALID_ARG: --seq %lld leaves no window in the %lld bytes of text\n", T, n_text);
        return 1;
    }
    if (threads && enkai_set_num_threads(threads)) fail("set_num_threads");
    if (enkai_tensor_manual_seed(seed)) fail("manual_seed");
    int64_t dev = must(enkai_tensor_device(device), "device");

    Config c = default_config();
    if (init) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", init);
        c = read_config(path);
    }
    if (T > (long long)c.positions) {
        fprintf(stderr, "E_INVALID_ARG: --seq %lld exceeds max_position_embeddings %.0f\n", T, c.positions);
        return 1;
    }
    Model m = model_of(c);
    /* The initial weights are data, not part of any graph. */
    if (enkai_set_grad_enabled(0) < 0) fail("set_grad_enabled");
    if (init) init_from(&m, init, dev);
    else init_random(&m, dev);
    if (enkai_set_grad_enabled(1) < 0) fail("set_grad_enabled");

    char *list = malloc((size_t)m.n * 24 + 4);
    if (!list) fail("malloc");
    size_t used = (size_t)sprintf(list, "[");
    for (int64_t i = 0; i < m.n; i++) {
        if (!enkai_tensor_require_grad(m.p[i])) fail("require_grad");
        used += (size_t)sprintf(list + used, "%s%lld", i ? "," : "", (long long)m.p[i]);
    }
    sprintf(list + used, "]");
    int64_t opt = must(enkai_opt_adamw_create(list, lr, 0.9, 0.999, 1e-8, wd), "adamw_create");

    int64_t cos, sin_signed;
    rope_tables(&m, T, dev, &cos, &sin_signed);
    Layer *spans = checkpoint ? calloc((size_t)m.L, sizeof *spans) : NULL;
    if (checkpoint && !spans) fail("malloc");
    int64_t *in = malloc((size_t)(B * T) * sizeof *in), *tgt = malloc((size_t)(B * T) * sizeof *tgt);
    if (!in || !tgt) fail("malloc");
    char ids_shape[64], tgt_shape[32];
    snprintf(ids_shape, sizeof ids_shape, "[%lld,%lld]", B, T);
    snprintf(tgt_shape, sizeof tgt_shape, "[%lld]", B * T);
    double t0 = now();
    for (long long step = 0; step < steps; step++) {
        for (long long b = 0; b < B; b++) {
            long long off = ((step * B + b) * 97) % (n_text - T);
            for (long long s = 0; s < T; s++) {
                in[b * T + s] = (unsigned char)TEXT[off + s];
                tgt[b * T + s] = (unsigned char)TEXT[off + s + 1];
            }
        }
        size_t bytes = (size_t)(B * T) * sizeof *in;
        int64_t ids = must(enkai_tensor_from_data(in, bytes, ids_shape, "int64", dev), "from_data");
        int64_t y = must(enkai_tensor_from_data(tgt, bytes, tgt_shape, "int64", dev), "from_data");
        if (enkai_tensor_zero_grad_multi(list)) fail("zero_grad");
        int64_t logits = forward(&m, ids, B, T, cos, sin_signed, spans);
        int64_t loss = must(enkai_tensor_cross_entropy(logits, y), "cross_entropy");
        drop(logits);
        drop(ids);
        drop(y);
        if (enkai_tensor_backward(loss)) fail("backward");
        if (enkai_opt_adamw_step(opt)) fail("adamw_step");
        double l = enkai_tensor_item(loss);
        if (enkai_tensor_last_error_code()) fail("item");
        drop(loss);
        printf("step %lld loss %.9g\n", step, l);
    }
    double dt = now() - t0;
    fprintf(stderr, "%lld steps in %.2f s (%.0f tokens/s), peak RSS %.1f MiB%s\n", steps, dt,
            dt > 0 ? (double)(steps * B * T) / dt : 0.0, peak_rss_kb() / 1024.0,
            checkpoint ? " (layers checkpointed)" : "");
    if (out) {
        save(&m, out);
        printf("saved %s\n", out);
    }

    free(in);
    free(tgt);
    free(list);
    free(spans);
    drop(cos);
    drop(sin_signed);
    if (enkai_tensor_opt_free(opt)) fail("opt_free");
    for (int64_t i = 0; i < m.n; i++) drop(m.p[i]);
    free(m.p);
    free(m.name);
    if (enkai_tensor_device_free(dev)) fail("device_free");
    if (enkai_tensor_live_tensors() || enkai_tensor_live_opts() || enkai_tensor_live_safetensors()) {
        fprintf(stderr, "leak: %lld tensors, %lld optimizers, %lld safetensors files still live\n",
                (long long)enkai_tensor_live_tensors(), (long long)enkai_tensor_live_opts(),
                (long long)enkai_tensor_live_safetensors());
        return 1;
    }
    return 0;
}
