/* quickstart: a device, two random matrices, their product, freed again.
 * Build: cc quickstart.c -Iinclude -Ltarget/release -lenkai_tensor -Wl,-rpath,$PWD/target/release */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "enkai_tensor.h"

/* Prints the last error and exits: the pattern every call below follows. */
static int64_t must(int64_t h, const char *what) {
    if (h == 0) {
        fprintf(stderr, "%s failed: %s\n", what, enkai_tensor_last_error());
        exit(1);
    }
    return h;
}

static void print_matrix(const char *name, int64_t t) {
    EnkaiSlice shape = enkai_tensor_shape(t);
    int64_t n = enkai_tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v || enkai_tensor_copy_to(t, v, sizeof(float) * (size_t)n) != 0) {
        fprintf(stderr, "copy_to failed: %s\n", enkai_tensor_last_error());
        exit(1);
    }
    printf("%s shape %.*s:", name, (int)shape.len, (const char *)shape.ptr);
    for (int64_t i = 0; i < n; i++) printf(" %8.4f", v[i]);
    printf("\n");
    enkai_free(shape.ptr, shape.len);
    free(v);
}

int main(void) {
    uint64_t v = enkai_abi_version();
    printf("enkai_tensor ABI %u.%u.%u\n", (unsigned)(v >> 32), (unsigned)(v >> 16 & 0xffff), (unsigned)(v & 0xffff));
    int64_t dev = must(enkai_tensor_device("auto"), "device");
    enkai_tensor_manual_seed(0);
    int64_t a = must(enkai_tensor_randn("[2,3]", "fp32", dev), "randn a");
    int64_t b = must(enkai_tensor_randn("[3,2]", "fp32", dev), "randn b");
    print_matrix("a", a);
    print_matrix("b", b);
    int64_t c = enkai_tensor_matmul(a, b);
    if (c == 0) {
        /* errors are values: code + message, the process carries on */
        printf("matmul failed: %s\n", enkai_tensor_last_error());
    } else {
        print_matrix("a @ b", c);
        enkai_tensor_free(c);
    }
    /* a mistake is reported, not fatal */
    if (enkai_tensor_randn("[2,oops]", "fp32", dev) == 0)
        printf("expected error: %s (code %d)\n", enkai_tensor_last_error(), enkai_tensor_last_error_code());
    enkai_tensor_free(a);
    enkai_tensor_free(b);
    enkai_tensor_device_free(dev);
    printf("live: tensors=%lld devices=%lld opts=%lld scalers=%lld\n", (long long)enkai_tensor_live_tensors(),
           (long long)enkai_tensor_live_devices(), (long long)enkai_tensor_live_opts(),
           (long long)enkai_tensor_live_scalers());
    return 0;
}
