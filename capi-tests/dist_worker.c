/* One rank of the multi-rank collective checks, launched by
 *   torchrun --no-python --standalone --nproc-per-node N build/capi/dist_worker
 * (or by python/tests/test_dist.py with RANK, WORLD_SIZE, MASTER_ADDR and
 * MASTER_PORT set by hand). Every value is integer-valued, so every result is
 * exact. Prints "dist rank R: N passed, N failed" and exits non-zero on a failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "check.h"

static int64_t dev;

static int64_t filled(const char *shape, double v, const char *dtype) {
    int64_t t = enkai_tensor_full(shape, v, dtype, dev);
    CHECK(t != 0);
    return t;
}

/* Every element of t (any dtype, at most 16) equals want. */
static int all_equal(int64_t t, double want) {
    int64_t d = enkai_tensor_to_dtype(t, "fp64");
    double v[16];
    int64_t n = enkai_tensor_numel(d);
    int ok = d && n >= 0 && n <= 16 && enkai_tensor_copy_to(d, v, sizeof(double) * (size_t)n) == 0;
    for (int64_t i = 0; ok && i < n; i++) ok = v[i] == want;
    if (!ok) fprintf(stderr, "want %g, got %g (of %lld)\n", want, n > 0 ? v[0] : -1.0, (long long)n);
    enkai_tensor_free(d);
    return ok;
}

static void list(char *buf, size_t n, int64_t a, int64_t b) {
    snprintf(buf, n, "[%lld,%lld]", (long long)a, (long long)b);
}

int main(void) {
    const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    if (!r || !w) {
        fprintf(stderr, "launch with torchrun (RANK and WORLD_SIZE are not set)\n");
        return 2;
    }
    int rank = atoi(r), world = atoi(w);
    char name[32], l[64];
    snprintf(name, sizeof name, "dist rank %d", rank);
    dev = enkai_tensor_device("cpu");
    int64_t base = enkai_tensor_live_tensors();

    if (world > 1) { /* the arguments must agree with torchrun's RANK */
        CHECK(enkai_dist_init(world, (rank + 1) % world) == 1);
        CHECK_ERR(E_DIST_ENV_MISMATCH);
    }
    CHECK(enkai_dist_init(world, rank) == 0);
    CHECK(enkai_dist_init(world, rank) == 1);
    CHECK_ERR(E_DIST);
    CHECK(enkai_dist_rank() == rank && enkai_dist_world_size() == world);

    /* sum, max and min of rank+1 over the ranks, for each dtype */
    const char *dtypes[] = {"fp32", "fp64", "bf16", "int64"};
    for (int i = 0; i < 4; i++) {
        int64_t s = filled("[5]", rank + 1, dtypes[i]), mx = filled("[2,2]", rank + 1, dtypes[i]);
        int64_t mn = filled("[]", rank + 1, dtypes[i]);
        snprintf(l, sizeof l, "[%lld]", (long long)s);
        CHECK(enkai_dist_allreduce_sum(l) == 0);
        CHECK_OK();
        CHECK(all_equal(s, world * (world + 1) / 2));
        snprintf(l, sizeof l, "[%lld]", (long long)mx);
        CHECK(enkai_dist_allreduce(l, "max") == 0 && all_equal(mx, world));
        snprintf(l, sizeof l, "[%lld]", (long long)mn);
        CHECK(enkai_dist_allreduce(l, "min") == 0 && all_equal(mn, 1));
        enkai_tensor_free(s), enkai_tensor_free(mx), enkai_tensor_free(mn);
    }

    /* mean (the client's data-parallel call): two dtypes in one list, a 0 entry, an empty tensor */
    int64_t a = filled("[3]", 2 * rank, "fp32"), b = filled("[4]", 4 * rank, "fp64");
    int64_t e = filled("[2,0]", 1, "fp32");
    snprintf(l, sizeof l, "[%lld,0,%lld,%lld]", (long long)a, (long long)b, (long long)e);
    CHECK(enkai_dist_allreduce_sum_multi(l) == 0);
    CHECK(all_equal(a, world - 1) && all_equal(b, 2 * (world - 1)) && enkai_tensor_numel(e) == 0);

    /* broadcast from the last rank */
    int64_t c = filled("[3]", rank, "fp32"), d = filled("[2]", 10 * rank, "int64");
    list(l, sizeof l, c, d);
    CHECK(enkai_dist_broadcast(l, world - 1) == 0 && all_equal(c, world - 1) && all_equal(d, 10 * (world - 1)));
    CHECK(enkai_dist_broadcast(l, world) == 1);
    CHECK_ERR(E_INVALID_ARG);

    /* all-gather: row r is rank r's */
    int64_t g = filled("[2]", rank, "fp32");
    int64_t gathered = enkai_dist_all_gather(g);
    CHECK(gathered != 0);
    EnkaiSlice shape = enkai_tensor_shape(gathered);
    char want[32];
    snprintf(want, sizeof want, "[%d,2]", world);
    CHECK(shape.ptr && shape.len == strlen(want) && memcmp(shape.ptr, want, shape.len) == 0);
    enkai_free(shape.ptr, shape.len);
    for (int i = 0; i < world; i++) {
        int64_t row = enkai_tensor_slice(gathered, 0, i, i + 1, 1);
        CHECK(all_equal(row, i));
        enkai_tensor_free(row);
    }

    /* DDP's gradient mean: grad of sum(p * (rank+1)) is rank+1 */
    int64_t p = filled("[3]", 1, "fp32"), q = filled("[2]", 1, "fp32"), k = filled("[3]", rank + 1, "fp32");
    CHECK(enkai_tensor_require_grad(p) == p && enkai_tensor_require_grad(q) == q);
    int64_t pk = enkai_tensor_mul(p, k), loss = enkai_tensor_sum(pk, -1, 0);
    CHECK(enkai_tensor_backward(loss) == 0);
    list(l, sizeof l, p, q); /* q has no grad on any rank: it takes no part */
    CHECK(enkai_dist_allreduce_grads(l, 0) == 0);
    int64_t pg = enkai_tensor_grad(p);
    CHECK(all_equal(pg, (world + 1) / 2.0) && enkai_tensor_grad(q) == 0);
    enkai_tensor_free(pg), enkai_tensor_free(pk), enkai_tensor_free(loss), enkai_tensor_free(k);

    /* bad arguments: a clean error on every rank, and the group stays usable */
    int64_t stale = filled("[1]", 0, "fp32");
    enkai_tensor_free(stale);
    snprintf(l, sizeof l, "[%lld]", (long long)stale);
    CHECK(enkai_dist_allreduce_sum(l) == 1);
    CHECK_ERR(E_HANDLE_STALE);
    snprintf(l, sizeof l, "[%lld]", rank == 0 ? 12345LL : (long long)a);
    CHECK(enkai_dist_allreduce_sum(l) == 1);
    if (rank == 0) CHECK_ERR(E_HANDLE_INVALID);
    else CHECK_ERR(E_DIST_MISMATCH);
    snprintf(l, sizeof l, "[%lld]", rank == 0 ? (long long)a : (long long)b); /* [3] fp32 vs [4] fp64 */
    CHECK(enkai_dist_allreduce_sum(l) == 1);
    CHECK_ERR(E_DIST_MISMATCH);
    snprintf(l, sizeof l, "[%lld]", (long long)d);
    CHECK(enkai_dist_allreduce_sum_multi(l) == 1); /* the mean of int64 */
    CHECK_ERR(E_DTYPE);
    CHECK(enkai_dist_allreduce(l, "prod") == 1);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(enkai_dist_allreduce_sum(NULL) == 1);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_dist_allreduce_sum("[1,") == 1);
    CHECK_ERR(E_INVALID_ARG);
    int64_t one = filled("[1]", 1, "fp32");
    snprintf(l, sizeof l, "[%lld]", (long long)one);
    CHECK(enkai_dist_allreduce_sum(l) == 0 && all_equal(one, world));
    CHECK(enkai_dist_barrier() == 0);

    CHECK(enkai_dist_shutdown() == 0 && enkai_dist_shutdown() == 0);
    CHECK(enkai_dist_allreduce_sum(l) == 1);
    CHECK_ERR(E_DIST);
    CHECK(enkai_dist_rank() == -1);

    int64_t all[] = {a, b, e, c, d, g, gathered, p, q, one};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) CHECK(enkai_tensor_free(all[i]) == 0);
    CHECK(enkai_tensor_live_tensors() == base);
    enkai_tensor_device_free(dev);
    return SUMMARY(name);
}
