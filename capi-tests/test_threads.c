/* 4 threads each create, retain and free 10,000 handles; the live counters
 * are exact at the end and no handle is ever handed out twice at once. */
#include <pthread.h>
#include <stdint.h>
#include "check.h"

#define THREADS 4
#define PER_THREAD 10000

static int64_t dev;
static int failures[THREADS];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    int64_t keep[16];
    for (int i = 0; i < PER_THREAD; i++) {
        int64_t t = (i % 2) ? enkai_tensor_full("[1]", (double)i, "fp32", dev) : enkai_tensor_device("cpu");
        if (t <= 0) { failures[id]++; continue; }
        int tensor = i % 2;
        if ((tensor ? enkai_tensor_retain(t) : enkai_tensor_device_retain(t)) != 0) failures[id]++;
        if ((tensor ? enkai_tensor_free(t) : enkai_tensor_device_free(t)) != 0) failures[id]++;
        if (tensor && enkai_tensor_item(t) != (double)i) failures[id]++;
        /* hold a few handles for a while so slots are reused out of order */
        int k = i % 16;
        if (i >= 16) {
            int64_t old = keep[k];
            if (((i - 16) % 2 ? enkai_tensor_free(old) : enkai_tensor_device_free(old)) != 0) failures[id]++;
            /* freed: it must now be stale, whatever other threads do with the slot */
            if (((i - 16) % 2 ? enkai_tensor_retain(old) : enkai_tensor_device_retain(old)) != 1 ||
                enkai_tensor_last_error_code() != E_HANDLE_STALE)
                failures[id]++;
        }
        keep[k] = t;
    }
    for (int i = PER_THREAD - 16; i < PER_THREAD; i++) {
        int64_t old = keep[i % 16];
        if ((i % 2 ? enkai_tensor_free(old) : enkai_tensor_device_free(old)) != 0) failures[id]++;
    }
    return NULL;
}

int main(void) {
    int64_t t0 = enkai_tensor_live_tensors(), d0 = enkai_tensor_live_devices();
    dev = enkai_tensor_device("cpu");
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++) CHECK(failures[i] == 0);
    CHECK(enkai_tensor_live_tensors() == t0);
    CHECK(enkai_tensor_live_devices() == d0 + 1);
    CHECK(enkai_tensor_device_free(dev) == 0);
    CHECK(enkai_tensor_live_devices() == d0);
    return SUMMARY("capi-threads");
}
