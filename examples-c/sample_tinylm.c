/* sample_tinylm: 50 tokens sampled from a small LM with temperature and
 * top-k, written with the generic entry `enkai_op` (PyTorch's names):
 *   next = indices.gather(-1, multinomial(softmax(topk(logits[:, -1] / T, k).values), 1))
 * Prints the tokens on one line. The test suite replays the same sampling
 * in PyTorch on the model's logits. Build: make build/examples/sample_tinylm */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "enkai_tensor.h"

#define SEQ 16
#define STEPS 50

static const char *SPEC = "{\"vocab_size\": 64, \"seq_len\": 16, \"d_model\": 32, \"n_layers\": 2, \"n_heads\": 2}";

static void fail(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, enkai_tensor_last_error());
    exit(1);
}

/* torch.<name>(*inputs, **kwargs) with `want` results. */
static void op(const char *name, const int64_t *inputs, size_t n, const char *kwargs, int64_t *out, size_t want) {
    if (enkai_op(name, inputs, n, kwargs, out, want) != (int64_t)want) fail(name);
}

int main(int argc, char **argv) {
    double temperature = argc > 1 ? atof(argv[1]) : 0.8;
    int k = argc > 2 ? atoi(argv[2]) : 10;
    int64_t dev = enkai_tensor_device("cpu");
    char *params;
    size_t len;
    if (enkai_tensor_lm_init(SPEC, dev, 42, &params, &len)) fail("lm_init");
    if (enkai_tensor_manual_seed(7)) fail("manual_seed"); /* the sampling's own stream */

    uint32_t ctx[SEQ];
    for (int i = 0; i < SEQ; i++) ctx[i] = (uint32_t)(i * 5 % 64);
    char temp[64], topk[32];
    snprintf(temp, sizeof temp, "{\"other\": %.17g}", temperature);
    snprintf(topk, sizeof topk, "{\"k\": %d}", k);
    printf("tokens:");
    for (int step = 0; step < STEPS; step++) {
        int64_t logits = enkai_tensor_lm_logits(params, SPEC, ctx, SEQ, 1, SEQ);
        if (!logits) fail("lm_logits");
        int64_t last, scaled, top[2], probs, pick, token;
        op("select", &logits, 1, "{\"dim\": 1, \"index\": -1}", &last, 1);
        op("div", &last, 1, temp, &scaled, 1);
        op("topk", &scaled, 1, topk, top, 2);
        op("softmax", &top[0], 1, "{\"dim\": -1}", &probs, 1);
        op("multinomial", &probs, 1, "{\"num_samples\": 1}", &pick, 1);
        op("gather", (int64_t[]){top[1], pick}, 2, "{\"dim\": -1}", &token, 1);
        int64_t t = (int64_t)enkai_tensor_item(token);
        printf(" %lld", (long long)t);
        memmove(ctx, ctx + 1, sizeof ctx - sizeof ctx[0]);
        ctx[SEQ - 1] = (uint32_t)t;
        int64_t all[] = {logits, last, scaled, top[0], top[1], probs, pick, token};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) enkai_tensor_free(all[i]);
    }
    printf("\n");
    /* The parameter handles, then the JSON list that named them. */
    for (char *p = params; *p; p++) {
        if (*p >= '0' && *p <= '9') {
            enkai_tensor_free(strtoll(p, &p, 10));
            p--;
        }
    }
    enkai_free((uint8_t *)params, len);
    enkai_tensor_device_free(dev);
    return enkai_tensor_live_tensors() == 0 ? 0 : 1;
}
