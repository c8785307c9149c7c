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
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(0.5f + i * 1e-3f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    double best = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
        for (long k = 0; k < iters / 5; k++) {
#define F(i) a[i] = _mm512_fmadd_ps(a[i], m, c);
            F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
            /* Keeps the compiler from unrolling the chains into memory or folding them. */
            __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
            __asm__ volatile("" : "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]), "+v"(a[12]), "+v"(a[13]), "+v"(a[14]), "+v"(a[15]));
        }
        double dt = now() - t0;
        double gflops = (double)(iters / 5) * 16 * 16 * 2 / dt * 1e-9;
        if (gflops > best) best = gflops;
    }
    float s = 0, out[16];
    for (int i = 0; i < 16; i++) {
        _mm512_storeu_ps(out, a[i]);
        s += out[0];
    }
    printf("%.1f\n", best);
    fprintf(stderr, "checksum %f\n", s);
    return 0;
}
