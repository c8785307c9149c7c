/* The machine's single-thread fp32 FMA peak: 16 independent AVX-512
 * accumulators (more than the FMA latency × ports needs, so the loop is
 * throughput-bound), registers only, no memory traffic. Prints GFLOP/s
 * (2 flops per lane per FMA). Built by `make bench`:
 *   cc -O2 -mavx512f benches/fma_peak.c -o build/bench/fma_peak */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const long iters = 100000000;
    /* Sixteen named accumulators (an array would live in memory, and the
     * loop would time its loads and stores). */
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15;
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = _mm512_set1_ps(0.5f);
    a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = _mm512_set1_ps(0.25f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    double best = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
        for (long k = 0; k < iters / 5; k++) {
#define F(x) x = _mm512_fmadd_ps(x, m, c);
            F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11) F(a12) F(a13) F(a14) F(a15)
            /* Keeps the compiler from folding the chains. */
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7));
            __asm__ volatile("" : "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(a12), "+v"(a13), "+v"(a14), "+v"(a15));
        }
        double dt = now() - t0;
        double gflops = (double)(iters / 5) * 16 * 16 * 2 / dt * 1e-9;
        if (gflops > best) best = gflops;
    }
    __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)), _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
    float s = _mm512_reduce_add_ps(sum);
    printf("%.1f\n", best);
    fprintf(stderr, "checksum %f\n", s);
    return 0;
}
