/* tensor_network: the squared norm <psi|psi> of a periodic matrix product
 * state (4 sites, bond dimension 3, physical dimension 2) as one einsum of
 * eight tensors (each site's tensor twice: ket and bra), and its gradient
 * with respect to every site tensor. The library picks the contraction
 * order (enkai_einsum_path shows it and its FLOPs); the backward pass runs
 * the same contractions in reverse.
 * Prints the path, the norm and the gradients; the test suite checks them
 * against torch.einsum and torch.autograd.grad.
 * Build: make build/examples/tensor_network */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "enkai_tensor.h"

#define SITES 4
#define BOND 3
#define PHYS 2
#define N (BOND * PHYS * BOND)

/* ket a-i-b, b-j-c, c-k-d, d-l-a; bra the same sites on bonds e..h. */
static const char *EQUATION = "aib,bjc,ckd,dla,eif,fjg,gkh,hle->";

static void fail(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, enkai_tensor_last_error());
    exit(1);
}

static int64_t must(int64_t h, const char *what) {
    if (h == 0) fail(what);
    return h;
}

int main(void) {
    int64_t dev = must(enkai_tensor_device("cpu"), "device");
    /* Deterministic site tensors the test rebuilds: sin of the flat index. */
    int64_t site[SITES];
    for (int s = 0; s < SITES; s++) {
        double v[N];
        for (int x = 0; x < N; x++) v[x] = sin(0.7 * x + s);
        site[s] = must(enkai_tensor_from_data(v, sizeof v, "[3,2,3]", "fp64", dev), "from_data");
        if (enkai_tensor_requires_grad_(site[s], 1) != 0) fail("requires_grad_");
    }

    char *path = NULL;
    size_t path_len = 0;
    if (enkai_einsum_path(EQUATION, "[[3,2,3],[3,2,3],[3,2,3],[3,2,3],[3,2,3],[3,2,3],[3,2,3],[3,2,3]]", &path, &path_len) != 0)
        fail("einsum_path");
    printf("path %s\n", path);
    enkai_tensor_string_free(path);

    int64_t operands[2 * SITES];
    for (int k = 0; k < 2 * SITES; k++) operands[k] = site[k % SITES];
    char kwargs[128];
    snprintf(kwargs, sizeof kwargs, "{\"equation\": \"%s\"}", EQUATION);
    int64_t norm;
    if (enkai_op("einsum", operands, 2 * SITES, kwargs, &norm, 1) != 1) fail("einsum");
    double z;
    if (enkai_tensor_copy_to(norm, &z, sizeof z) != 0) fail("copy_to");
    printf("norm %.17g\n", z);

    if (enkai_tensor_backward(norm) != 0) fail("backward");
    for (int s = 0; s < SITES; s++) {
        int64_t g = must(enkai_tensor_grad(site[s]), "grad");
        double v[N];
        if (enkai_tensor_copy_to(g, v, sizeof v) != 0) fail("copy_to");
        printf("grad %d", s);
        for (int x = 0; x < N; x++) printf(" %.17g", v[x]);
        printf("\n");
        enkai_tensor_free(g);
    }

    enkai_tensor_free(norm);
    for (int s = 0; s < SITES; s++) enkai_tensor_free(site[s]);
    enkai_tensor_device_free(dev);
    return enkai_tensor_live_tensors() == 0 ? 0 : 1;
}
