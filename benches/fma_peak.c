/* The machine's single-thread fp32 FMA peak: independent accumulators (more
 * than the FMA latency × ports needs, so the loop is throughput-bound),
 * registers only, no memory traffic. Prints GFLOP/s (2 flops per lane per
 * FMA) at the widest vector the CPU has: AVX-512 where it is present, else
 * AVX2 (AMD Zen 2/3, older Intel). The ISA goes to stderr. Built by
 * `make bench` with no -m flags; each loop is compiled for its own ISA and
 * picked at run time. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ROUNDS rounds of ITERS / 5 iterations (about 40 ms each), the best kept:
 * on a shared host a neighbour can slow this core for a second or more, and
 * a peak taken in such a spell made every "of peak" figure read high. */
static const long ITERS = 100000000;
enum { ROUNDS = 25 };

/* Sixteen named accumulators (an array would live in memory, and the loop
 * would time its loads and stores): 32 zmm registers hold them and the two
 * constants. */
__attribute__((target("avx512f"))) static double peak_avx512(void) {
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15;
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = _mm512_set1_ps(0.5f);
    a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = _mm512_set1_ps(0.25f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    double best = 0;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now();
        for (long k = 0; k < ITERS / 5; k++) {
#define F(x) x = _mm512_fmadd_ps(x, m, c);
            F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11) F(a12) F(a13) F(a14) F(a15)
#undef F
            /* Keeps the compiler from folding the chains. */
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7));
            __asm__ volatile("" : "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(a12), "+v"(a13), "+v"(a14), "+v"(a15));
        }
        double gflops = (double)(ITERS / 5) * 16 * 16 * 2 / (now() - t0) * 1e-9;
        if (gflops > best) best = gflops;
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)), _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
    fprintf(stderr, "avx512 checksum %f\n", _mm512_reduce_add_ps(s));
    return best;
}

/* Twelve accumulators: 16 ymm registers hold them and the two constants, and
 * 12 cover two FMA pipes of latency 4 to 5 (Zen 3: 2 × 4 = 8). */
__attribute__((target("avx2,fma"))) static double peak_avx2(void) {
    __m256 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    a0 = a1 = a2 = a3 = a4 = a5 = _mm256_set1_ps(0.5f);
    a6 = a7 = a8 = a9 = a10 = a11 = _mm256_set1_ps(0.25f);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    double best = 0;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now();
        for (long k = 0; k < ITERS / 5; k++) {
#define F(x) x = _mm256_fmadd_ps(x, m, c);
            F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11)
#undef F
            __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
            __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
        }
        double gflops = (double)(ITERS / 5) * 12 * 8 * 2 / (now() - t0) * 1e-9;
        if (gflops > best) best = gflops;
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    fprintf(stderr, "avx2 checksum %f\n", lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7]);
    return best;
}

int main(void) {
    __builtin_cpu_init();
    double best;
    if (__builtin_cpu_supports("avx512f")) {
        best = peak_avx512();
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        best = peak_avx2();
    } else {
        fprintf(stderr, "fma_peak: this CPU has neither AVX-512 nor AVX2 with FMA\n");
        return 1;
    }
    printf("%.1f\n", best);
    return 0;
}
