/* causal_attention: single-head causal self-attention written out of basic
 * ops through the generic entry `enkai_op` (PyTorch's names and kwargs):
 *   scores = q @ k^T * scale;  scores[j > i] = -inf;  out = softmax(scores) @ v
 * Prints the output, one value per line after a header line; the test suite
 * checks it against torch.nn.functional.scaled_dot_product_attention(is_causal=True).
 * Build: make build/examples/causal_attention */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "enkai_tensor.h"

#define B 2
#define L 5
#define D 4

static int64_t must(int64_t h, const char *what) {
    if (h == 0) {
        fprintf(stderr, "%s failed: %s\n", what, enkai_tensor_last_error());
        exit(1);
    }
    return h;
}

/* One-result op: torch.<name>(*inputs, **kwargs). */
static int64_t op(const char *name, const int64_t *inputs, size_t n, const char *kwargs) {
    int64_t out;
    if (enkai_op(name, inputs, n, kwargs, &out, 1) != 1) {
        fprintf(stderr, "%s failed: %s\n", name, enkai_tensor_last_error());
        exit(1);
    }
    return out;
}

/* Deterministic inputs the test rebuilds: sin of the flat index, per tensor. */
static int64_t input(int which, int64_t dev) {
    static float v[B * L * D];
    for (int i = 0; i < B * L * D; i++) v[i] = sinf(0.37f * (float)i + (float)which);
    return must(enkai_tensor_from_data(v, sizeof v, "[2,5,4]", "fp32", dev), "from_data");
}

int main(void) {
    int64_t dev = must(enkai_tensor_device("cpu"), "device");
    int64_t q = input(0, dev), k = input(1, dev), v = input(2, dev);

    int64_t kt = must(enkai_tensor_transpose(k, -2, -1), "transpose");
    int64_t scores = must(enkai_tensor_matmul(q, kt), "matmul");
    char scale[64];
    snprintf(scale, sizeof scale, "{\"other\": %.17g}", 1.0 / sqrt((double)D));
    int64_t scaled = op("mul", (int64_t[]){scores}, 1, scale);

    /* The causal mask: ones below and on the diagonal; masked where 0. */
    int64_t ones = must(enkai_tensor_ones("[5,5]", "bool", dev), "ones");
    int64_t keep = op("tril", (int64_t[]){ones}, 1, NULL);
    int64_t hide = op("logical_not", (int64_t[]){keep}, 1, NULL);
    int64_t masked = op("masked_fill", (int64_t[]){scaled, hide}, 2, "{\"value\": -Infinity}");
    int64_t attn = op("softmax", (int64_t[]){masked}, 1, "{\"dim\": -1}");
    int64_t out = must(enkai_tensor_matmul(attn, v), "matmul");

    float res[B * L * D];
    if (enkai_tensor_copy_to(out, res, sizeof res) != 0) {
        fprintf(stderr, "copy_to failed: %s\n", enkai_tensor_last_error());
        return 1;
    }
    printf("causal attention [%d, %d, %d]\n", B, L, D);
    for (int i = 0; i < B * L * D; i++) printf("%.9g\n", res[i]);

    int64_t all[] = {q, k, v, kt, scores, scaled, ones, keep, hide, masked, attn, out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) enkai_tensor_free(all[i]);
    enkai_tensor_device_free(dev);
    return enkai_tensor_live_tensors() == 0 ? 0 : 1;
}
