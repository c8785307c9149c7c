/* accuracy: a classifier's accuracy from its logits, with argmax and eq
 * through the generic entry `enkai_op` (PyTorch's names and kwargs):
 *   accuracy = (logits.argmax(dim=1) == labels).float().mean()
 * Prints the predictions and the accuracy; the test suite checks them
 * against PyTorch. Build: make build/examples/accuracy */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "enkai_tensor.h"

#define N 16
#define C 5

static int64_t op(const char *name, const int64_t *inputs, size_t n, const char *kwargs) {
    int64_t out;
    if (enkai_op(name, inputs, n, kwargs, &out, 1) != 1) {
        fprintf(stderr, "%s failed: %s\n", name, enkai_tensor_last_error());
        exit(1);
    }
    return out;
}

int main(void) {
    int64_t dev = enkai_tensor_device("cpu");
    /* Deterministic logits and labels the test rebuilds. */
    float logits[N * C];
    int64_t labels[N];
    for (int i = 0; i < N * C; i++) logits[i] = cosf(1.3f * (float)i) + 0.01f * (float)(i % 7);
    for (int i = 0; i < N; i++) labels[i] = (i * 3) % C;
    int64_t x = enkai_tensor_from_data(logits, sizeof logits, "[16,5]", "fp32", dev);
    int64_t y = enkai_tensor_from_data(labels, sizeof labels, "[16]", "int64", dev);
    if (!x || !y) {
        fprintf(stderr, "from_data failed: %s\n", enkai_tensor_last_error());
        return 1;
    }
    int64_t pred = op("argmax", (int64_t[]){x}, 1, "{\"dim\": 1}");
    int64_t hit = op("eq", (int64_t[]){pred, y}, 2, NULL);
    int64_t acc = op("mean", (int64_t[]){hit}, 1, "{\"dtype\": \"float32\"}");

    int64_t p[N];
    if (enkai_tensor_copy_to(pred, p, sizeof p) != 0) return 1;
    printf("predictions:");
    for (int i = 0; i < N; i++) printf(" %lld", (long long)p[i]);
    printf("\naccuracy %.9g\n", enkai_tensor_item(acc));

    int64_t all[] = {x, y, pred, hit, acc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) enkai_tensor_free(all[i]);
    enkai_tensor_device_free(dev);
    return enkai_tensor_live_tensors() == 0 ? 0 : 1;
}
