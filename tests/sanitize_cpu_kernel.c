/* Runs sst_cli/archs/cpu_attention.c under AddressSanitizer and UndefinedBehaviorSanitizer on awkward shapes
 * (key and row tails, lone and grouped windows, no factors, several query and key blocks, 1-3 threads).
 * Built and run by tests/test_cpu_kernel.py; exits non-zero on any finding or non-finite output. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int sst_attention(const float *q, const float *kp, const float *v, const float *pq, const float *pkp, float *o,
                  int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t d, int64_t rank, int64_t dv,
                  int threads);

static float *random_floats(int64_t count) {
    float *p = malloc((size_t)count * sizeof(float));
    for (int64_t i = 0; i < count; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

int main(void) {
    const int64_t cases[][6] = {/* batch, heads, tokens, d, rank, dv */
                                {3, 2, 37, 9, 5, 8},   {1, 3, 100, 13, 0, 16}, {40, 2, 16, 8, 4, 8},
                                {1, 2, 600, 12, 6, 24}, {5, 1, 3, 4, 2, 8},    {2, 6, 256, 30, 34, 32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int threads = 1; threads <= 3; threads++) {
            int64_t b = cases[c][0], h = cases[c][1], n = cases[c][2], d = cases[c][3], r = cases[c][4];
            int64_t dv = cases[c][5], m16 = (n + 15) / 16 * 16;
            float *q = random_floats(b * h * n * d), *k = random_floats(b * h * m16 * d);
            float *v = random_floats(b * h * m16 * dv), *o = malloc((size_t)(b * h * n * dv) * sizeof(float));
            float *pq = r ? random_floats(h * n * r) : NULL, *pk = r ? random_floats(h * m16 * r) : NULL;
            if (sst_attention(q, k, v, pq, pk, o, b, h, n, n, d, r, dv, threads) != 0) return 2;
            for (int64_t i = 0; i < b * h * n * dv; i++)
                if (!isfinite(o[i])) return 3;
            free(q), free(k), free(v), free(o), free(pq), free(pk);
        }
    }
    puts("ok");
    return 0;
}
