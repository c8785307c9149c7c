/* One core's read rate from memory, the bound of a batch-1 decoding step
 * (which reads every weight once): sums 512 MiB with AVX2 (the baseline's
 * SSE2 where the CPU lacks it) from 4 KiB pages (MADV_NOHUGEPAGE, as
 * PyTorch's allocator gets by default where transparent huge pages are
 * `madvise`) and from 2 MiB pages (MADV_HUGEPAGE, as the native backend
 * asks for its large buffers), rounds alternating, the best of each. Prints
 * `<4k GB/s> <huge GB/s>`; the pages the kernel gave go to stderr. Built by
 * `make bench` (build/bench/read_rate). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { ROUNDS = 7 };
static const size_t BYTES = (size_t)512 << 20, ALIGN = (size_t)2 << 20;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return o[0] + o[7];
}

static float sum_sse2(const float *p, size_t n) {
    __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 16) {
        a0 = _mm_add_ps(a0, _mm_load_ps(p + i));
        a1 = _mm_add_ps(a1, _mm_load_ps(p + i + 4));
        a2 = _mm_add_ps(a2, _mm_load_ps(p + i + 8));
        a3 = _mm_add_ps(a3, _mm_load_ps(p + i + 12));
    }
    float o[4];
    _mm_storeu_ps(o, _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)));
    return o[0] + o[3];
}

/* BYTES of written memory, 2 MiB-aligned, advised `advice` before the first touch. */
static float *region(int advice) {
    char *base = mmap(NULL, BYTES + ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *p = (char *)(((size_t)base + ALIGN - 1) & ~(ALIGN - 1));
    madvise(p, BYTES, advice);
    memset(p, 1, BYTES);
    return (float *)p;
}

int main(void) {
    __builtin_cpu_init();
    float (*sum)(const float *, size_t) = __builtin_cpu_supports("avx2") ? sum_avx2 : sum_sse2;
    float *mem[2] = {region(MADV_NOHUGEPAGE), region(MADV_HUGEPAGE)};
    double best[2] = {0, 0};
    volatile float sink = 0;
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 2; k++) {
            double t = now();
            sink += sum(mem[k], BYTES / sizeof(float));
            double gbs = BYTES / (now() - t) / 1e9;
            if (gbs > best[k]) best[k] = gbs;
        }
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "AnonHugePages:", 14)) fprintf(stderr, "read_rate: %s", line);
    if (f) fclose(f);
    printf("%.2f %.2f\n", best[0], best[1]);
    return 0;
}
