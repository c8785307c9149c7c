/* DLPack 1.x in C, as a program that exchanges tensors with another framework
 * would use it: export a tensor and read and write its memory through the
 * DLTensor, import memory this program owns and see its deleter run exactly
 * once when the last handle goes, and the refusals (a major version of 2, a
 * misaligned pointer, negative strides) that must release the tensor too.
 * Runs under valgrind: every byte handed across is accounted for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dlpack_min.h"
#include "enkai_tensor.h"

/* A producer: one malloc'ed block holding the managed tensor, its shape and
 * strides, and its data; the deleter counts and frees it. */
typedef struct {
    DLManagedTensorVersioned m;
    int64_t shape[2], strides[2];
    float data[6];
} producer_t;
static int released;

static void producer_deleter(DLManagedTensorVersioned *m) {
    released++;
    free(m);
}

static producer_t *produce(uint32_t major) {
    producer_t *p = calloc(1, sizeof *p);
    for (int i = 0; i < 6; i++) p->data[i] = (float)i;
    p->shape[0] = 2;
    p->shape[1] = 3;
    p->m.version = (DLPackVersion){major, 0};
    p->m.deleter = producer_deleter;
    p->m.dl_tensor = (DLTensor){.data = p->data, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1},
                                .shape = p->shape, .strides = NULL, .byte_offset = 0};
    return p;
}

static float first(int64_t t) {
    float v[6] = {0};
    CHECK(enkai_tensor_copy_to(t, v, sizeof v) == 0);
    return v[0];
}

int main(void) {
    int64_t cpu = enkai_tensor_device("cpu");
    int64_t base = enkai_tensor_live_tensors();

    /* Export: shares memory, counts as a live tensor until the deleter runs,
     * and outlives the handle it came from. */
    int64_t a = enkai_tensor_zeros("[2,3]", "fp32", cpu);
    DLManagedTensorVersioned *m = enkai_tensor_to_dlpack(a);
    CHECK(m != NULL);
    CHECK_OK();
    CHECK(m->version.major == 1 && m->deleter != NULL && m->flags == 0);
    CHECK(m->dl_tensor.ndim == 2 && m->dl_tensor.shape[0] == 2 && m->dl_tensor.shape[1] == 3);
    CHECK(m->dl_tensor.strides[0] == 3 && m->dl_tensor.strides[1] == 1);
    CHECK(m->dl_tensor.dtype.code == kDLFloat && m->dl_tensor.dtype.bits == 32 && m->dl_tensor.dtype.lanes == 1);
    CHECK(m->dl_tensor.device.device_type == kDLCPU);
    CHECK(enkai_tensor_live_tensors() == base + 2);
    ((float *)m->dl_tensor.data)[0] = 7.5f; /* the consumer writes; the tensor sees it */
    CHECK(first(a) == 7.5f);
    CHECK(enkai_tensor_free(a) == 0);
    CHECK(enkai_tensor_live_tensors() == base + 1);
    CHECK(((float *)m->dl_tensor.data)[0] == 7.5f); /* still alive: the export holds it */
    m->deleter(m);
    CHECK(enkai_tensor_live_tensors() == base);

    /* A transposed view exports its strides, not a copy. */
    int64_t b = enkai_tensor_randn("[2,3]", "fp64", cpu);
    int64_t bt = enkai_tensor_transpose(b, 0, 1);
    m = enkai_tensor_to_dlpack(bt);
    CHECK(m && m->dl_tensor.shape[0] == 3 && m->dl_tensor.strides[0] == 1 && m->dl_tensor.strides[1] == 3);
    CHECK(m && m->dl_tensor.dtype.code == kDLFloat && m->dl_tensor.dtype.bits == 64);
    if (m) m->deleter(m);
    enkai_tensor_free(bt);

    /* A tensor that requires grad is refused, as torch.to_dlpack refuses it. */
    enkai_tensor_require_grad(b);
    CHECK(enkai_tensor_to_dlpack(b) == NULL);
    CHECK_ERR(E_AUTOGRAD);
    enkai_tensor_free(b);
    CHECK(enkai_tensor_to_dlpack(b) == NULL);
    CHECK_ERR(E_HANDLE_STALE);

    /* Import: no copy; ops see the producer's memory; the deleter runs once,
     * when the last handle (here a view made from it) is freed. */
    producer_t *p = produce(1);
    int64_t x = enkai_tensor_from_dlpack(&p->m);
    CHECK(x != 0);
    CHECK_OK();
    CHECK(released == 0);
    p->data[0] = 42.0f;
    CHECK(first(x) == 42.0f);
    int64_t xv = enkai_tensor_reshape(x, "[6]");
    int64_t s = enkai_tensor_sum(x, 1, 0);
    float sums[2] = {0};
    CHECK(enkai_tensor_copy_to(s, sums, sizeof sums) == 0);
    CHECK(sums[0] == 42.0f + 1 + 2 && sums[1] == 3 + 4 + 5);
    CHECK(enkai_tensor_free(x) == 0);
    CHECK(released == 0); /* the view still holds the memory */
    CHECK(enkai_tensor_free(xv) == 0);
    CHECK(released == 1);
    enkai_tensor_free(s);

    /* Read-only memory is copied and released at once. */
    p = produce(1);
    p->m.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    x = enkai_tensor_from_dlpack(&p->m);
    CHECK(x != 0 && released == 2);
    CHECK(first(x) == 0.0f);
    enkai_tensor_free(x);

    /* Refusals: the library owns the tensor either way, so it only calls the deleter. */
    p = produce(2);
    CHECK(enkai_tensor_from_dlpack(&p->m) == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(released == 3);
    p = produce(1);
    p->m.dl_tensor.byte_offset = 2; /* not a multiple of 4 */
    CHECK(enkai_tensor_from_dlpack(&p->m) == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(released == 4);
    p = produce(1);
    p->strides[0] = -3;
    p->strides[1] = 1;
    p->m.dl_tensor.strides = p->strides;
    CHECK(enkai_tensor_from_dlpack(&p->m) == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(released == 5);
    p = produce(1);
    p->m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4}; /* vector lanes */
    CHECK(enkai_tensor_from_dlpack(&p->m) == 0);
    CHECK_ERR(E_DTYPE);
    CHECK(released == 6);
    p = produce(1);
    p->m.dl_tensor.device = (DLDevice){14, 0}; /* kDLOneAPI: not ours */
    CHECK(enkai_tensor_from_dlpack(&p->m) == 0);
    CHECK_ERR(E_DEVICE);
    CHECK(released == 7);
    CHECK(enkai_tensor_from_dlpack(NULL) == 0);
    CHECK_ERR(E_NULL_POINTER);

    /* Round trip: our export imported back shares the same memory. */
    int64_t c = enkai_tensor_ones("[4]", "int64", cpu);
    m = enkai_tensor_to_dlpack(c);
    int64_t c2 = enkai_tensor_from_dlpack(m);
    CHECK(c2 != 0);
    int64_t ones[4] = {0};
    CHECK(enkai_tensor_copy_to(c2, ones, sizeof ones) == 0 && ones[0] == 1 && ones[3] == 1);
    enkai_tensor_free(c);
    enkai_tensor_free(c2);

    CHECK(enkai_tensor_live_tensors() == base);
    enkai_tensor_device_free(cpu);
    return SUMMARY("capi-dlpack");
}
