/* Runs sst_cli/archs/cpu_attention.c under AddressSanitizer and UndefinedBehaviorSanitizer on awkward shapes
 * (key and row tails, lone and grouped windows, no factors, several query and key blocks, 1-3 threads), and
 * checks every output against attention computed in double precision here, for whatever vector width the
 * build chose (8 or 16 floats). The entry that computes listed windows and query rows only must match the full
 * run on those and leave every other output untouched. Built and run by tests/test_cpu_kernel.py; exits non-zero
 * on any finding, a non-finite output or an error above 1e-5, and prints "ok" otherwise. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int sst_attention(const float *q, const float *kp, const float *v, const float *pq, const float *pkp, float *o,
                  int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t d, int64_t rank, int64_t dv,
                  int threads);
int sst_attention_rows(const float *q, const float *kp, const float *v, const float *pq, const float *pkp, float *o,
                       int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t d, int64_t rank, int64_t dv,
                       const int64_t *wins, int64_t count, const int64_t *rows, int64_t kept, int threads);
int sst_attention_vector(void);
int sst_attention_key_tile(void);

static float *random_floats(int64_t count) {
    float *p = malloc((size_t)count * sizeof(float));
    for (int64_t i = 0; i < count; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

/* Channel c of key j in a packed block (tiles of kt keys, channel-major within a tile). */
static double packed(const float *k, int64_t j, int64_t c, int64_t d, int64_t kt) {
    return k[(j / kt) * d * kt + c * kt + j % kt];
}

/* Largest |error| of one batch item and head against double-precision attention over the n real keys. */
/* Windows b-1, b-3, ... and rows n-1, n-4, ... (reversed: any order is allowed) into a NaN-filled output: listed
 * outputs within 1e-5 of the full run's `o`, the rest still NaN. Returns 0 when so. */
static int check_rows(const float *q, const float *k, const float *v, const float *pq, const float *pk, const float *o,
                      int64_t b, int64_t h, int64_t n, int64_t d, int64_t r, int64_t dv, int threads) {
    int64_t *wins = malloc((size_t)b * sizeof(int64_t)), *rows = malloc((size_t)n * sizeof(int64_t)), count = 0,
            kept = 0;
    char *listed = calloc((size_t)(b * n), 1);
    for (int64_t i = b - 1; i >= 0; i -= 2) wins[count++] = i;
    for (int64_t i = n - 1; i >= 0; i -= 3) rows[kept++] = i;
    for (int64_t i = 0; i < count; i++)
        for (int64_t j = 0; j < kept; j++) listed[wins[i] * n + rows[j]] = 1;
    float *out = malloc((size_t)(b * h * n * dv) * sizeof(float));
    for (int64_t i = 0; i < b * h * n * dv; i++) out[i] = NAN;
    int status = sst_attention_rows(q, k, v, pq, pk, out, b, h, n, n, d, r, dv, wins, count, rows, kept, threads);
    for (int64_t i = 0; status == 0 && i < b * h * n * dv; i++) {
        int64_t row = i / dv % n, win = i / (dv * n * h);
        if (listed[win * n + row] ? !(fabs(out[i] - o[i]) <= 1e-5) : !isnan(out[i])) status = 5;
    }
    free(wins), free(rows), free(listed), free(out);
    return status;
}

static double worst_error(const float *q, const float *k, const float *v, const float *pq, const float *pk,
                          const float *o, int64_t n, int64_t d, int64_t r, int64_t dv, int64_t kt) {
    double worst = 0, *s = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) {
            double x = 0;
            for (int64_t c = 0; c < d; c++) x += (double)q[i * d + c] * packed(k, j, c, d, kt);
            for (int64_t c = 0; c < r; c++) x += (double)pq[i * r + c] * packed(pk, j, c, r, kt);
            s[j] = x;
            top = x > top ? x : top;
        }
        for (int64_t j = 0; j < n; j++) sum += s[j] = exp(s[j] - top);
        for (int64_t c = 0; c < dv; c++) {
            double y = 0;
            for (int64_t j = 0; j < n; j++) y += s[j] * v[j * dv + c];
            double error = fabs(y / sum - o[i * dv + c]);
            worst = error > worst ? error : worst;
        }
    }
    free(s);
    return worst;
}

int main(void) {
    const int64_t cases[][6] = {/* batch, heads, tokens, d, rank, dv (rounded up to the build's vector) */
                                {3, 2, 37, 9, 5, 8},   {1, 3, 100, 13, 0, 16}, {40, 2, 16, 8, 4, 8},
                                {1, 2, 600, 12, 6, 24}, {5, 1, 3, 4, 2, 8},    {2, 6, 256, 30, 34, 32}};
    const int64_t vector = sst_attention_vector(), kt = sst_attention_key_tile();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int threads = 1; threads <= 3; threads++) {
            int64_t b = cases[c][0], h = cases[c][1], n = cases[c][2], d = cases[c][3], r = cases[c][4];
            int64_t dv = (cases[c][5] + vector - 1) / vector * vector, mt = (n + kt - 1) / kt * kt;
            float *q = random_floats(b * h * n * d), *k = random_floats(b * h * mt * d);
            float *v = random_floats(b * h * mt * dv), *o = malloc((size_t)(b * h * n * dv) * sizeof(float));
            float *pq = r ? random_floats(h * n * r) : NULL, *pk = r ? random_floats(h * mt * r) : NULL;
            if (sst_attention(q, k, v, pq, pk, o, b, h, n, n, d, r, dv, threads) != 0) return 2;
            for (int64_t i = 0; i < b * h * n * dv; i++)
                if (!isfinite(o[i])) return 3;
            int listed = check_rows(q, k, v, pq, pk, o, b, h, n, d, r, dv, threads);
            if (listed != 0) {
                printf("case %zu, threads %d: listed windows and rows wrong (%d)\n", c, threads, listed);
                return listed;
            }
            for (int64_t bh = 0; threads == 1 && bh < b * h; bh++) {
                int64_t head = bh % h;
                double error = worst_error(q + bh * n * d, k + bh * mt * d, v + bh * mt * dv,
                                           r ? pq + head * n * r : NULL, r ? pk + head * mt * r : NULL,
                                           o + bh * n * dv, n, d, r, dv, kt);
                if (!(error <= 1e-5)) {
                    printf("case %zu, item %lld: error %.3g (vector %lld)\n", c, (long long)bh, error,
                           (long long)vector);
                    return 4;
                }
            }
            free(q), free(k), free(v), free(o), free(pq), free(pk);
        }
    }
    puts("ok");
    return 0;
}
