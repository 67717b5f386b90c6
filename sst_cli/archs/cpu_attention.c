/* sst-cli's fp32 attention kernel for the CPU: softmax(q k^T) v with q/k and v of different widths.
 *
 * Why it exists: PyTorch's fused CPU kernel needs one head size for q, k and v, so SST's v (D channels) has to
 * be zero-padded to q/k's D + R and a third of the arithmetic multiplies zeros. Here the scores use D + R
 * channels and the value product D (rounded up to the vector width). Compiled on first use by
 * sst_cli/archs/cpu_kernel.py with the machine's own C compiler (-O3 -march=native) and called through ctypes;
 * GCC/Clang vector extensions keep it portable: 16-float vectors where the target has AVX-512 (1.2-1.4x faster
 * per call than the AVX2 build on the same Xeon, benchmarks/RESULTS.md), 8 with AVX2 + FMA or NEON.
 *
 * Layout: q (batch, heads, n, d): content channels; k packed in tiles of KT keys, (batch * heads, mt / KT, d,
 * KT), so that the score loop reads one contiguous stream; v (batch * heads, mt, dv) with dv a multiple of W;
 * o like q with dv channels. mt is m rounded up to KT: keys from m on are padding (their scores are masked to
 * -inf; their v rows must be finite, e.g. zero). Optional positional factors shared by the batch (SST's RIB):
 * pq (heads, n, rank) and pk packed like k, (heads, mt / KT, rank, KT); their product is added to the logits.
 * It is computed once per block of query rows for a group of windows and read back as the initial value of the
 * scores, so each window pays d multiply-adds per score for q k^T instead of d + rank.
 *
 * Each thread takes blocks of QB query rows of one head (and a group of windows) and runs an online softmax over
 * blocks of KB keys (the "flash" recurrence), RB rows at a time: scores (RB x KB, in L1) -> exp2 -> P V. Logits are
 * multiplied by log2(e) so that the exponential is a power of two: integer exponent plus a degree-5
 * polynomial on [-0.5, 0.5] (relative error 8e-8, below float32's rounding).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Floats per vector: what the target's widest float unit takes (AVX-512: 16; AVX2, NEON: 8, two NEON registers). */
#if defined(__AVX512F__)
#define W 16
#else
#define W 8
#endif
typedef float vf __attribute__((vector_size(4 * W), aligned(4))); /* aligned(4): unaligned loads are fine */
typedef int32_t vi __attribute__((vector_size(4 * W), aligned(4)));
typedef uint32_t vu __attribute__((vector_size(4 * W), aligned(4)));
#define KT (2 * W)  /* keys per packed tile: two vectors */
#if W == 16 /* query rows per register block: 2 * RB accumulators, of 32 registers (AVX-512) or 16 */
#define RB 12
#else
#define RB 6
#endif
#define QB 96  /* query rows per work item: a multiple of RB */
#define KB 512 /* keys per softmax step */
#define MAX_THREADS 256
#define INLINE static inline __attribute__((always_inline))

INLINE vf splat(float x) { /* spelled out: 0 + x is not x for -0, so `(vf){0} + x` costs an addition */
#if W == 16
    return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
    return (vf){x, x, x, x, x, x, x, x};
#endif
}
INLINE vf load(const float *p) { return *(const vf *)p; }
INLINE void store(float *p, vf x) { *(vf *)p = x; }

INLINE vf vmax(vf a, vf b) {
#if defined(__AVX__) && defined(__x86_64__) && W == 8
    return __builtin_ia32_maxps256(a, b);
#else
    vi m = a > b;
    return (vf)(((vi)a & m) | ((vi)b & ~m));
#endif
}

/* 2^x for x <= 0. Below -126 the result is 2^-126 instead of smaller: negligible beside the maximum's 1. */
INLINE vf vexp2(vf x) {
    const vf magic = splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer in the low bits */
    x = vmax(x, splat(-126.0f));
    vf t = x + magic;
    vf r = x - (t - magic); /* in [-0.5, 0.5] */
    vf p = splat(1.326697993e-3f);
    p = p * r + splat(9.675469395e-3f);
    p = p * r + splat(5.550742675e-2f);
    p = p * r + splat(2.402212158e-1f);
    p = p * r + splat(6.931469491e-1f);
    p = p * r + splat(1.000000071f);
    return (vf)((vu)p + (((vu)t - (vu)magic) << 23)); /* times 2^n: add n to the exponent field (mod 2^32) */
}

INLINE float hmax(vf x) {
    float m = x[0];
    for (int i = 1; i < W; i++) m = x[i] > m ? x[i] : m;
    return m;
}

INLINE float hsum(vf x) {
    float s = 0;
    for (int i = 0; i < W; i++) s += x[i];
    return s;
}

/* acc[r] += q_r . k over dq channels, for one packed tile of KT keys; q interleaved (see interleave). */
INLINE void dot_tile(const int R, vf (*a)[2], const float *q, int64_t dq, const float *k) {
    for (int64_t c = 0; c < dq; c++, k += KT, q += RB) {
        vf k0 = load(k), k1 = load(k + W);
        for (int r = 0; r < R; r++) {
            vf b = splat(q[r]);
            a[r][0] += b * k0;
            a[r][1] += b * k1;
        }
    }
}

/* out[r][j] = scale * (init[r][j] + q_r . k_j + q2_r . k2_j) for R query rows and keys j in [0, kb) of packed
 * tiles; init and the second source (q2, k2: dq2 channels) may be absent (NULL). With vm: keys from `valid` on
 * are padding (-inf) and vm gets the row maxima. */
INLINE void dots(const int R, const float *q, int64_t dq, const float *kp, const float *q2, int64_t dq2,
                 const float *kp2, int64_t kb, const float *init, int64_t ldi, float *out, int64_t ldo, float scale,
                 int64_t valid, vf *vm) {
    const vf factor = splat(scale);
    if (vm != NULL)
        for (int r = 0; r < R; r++) vm[r] = splat(-INFINITY);
    for (int64_t j = 0; j < kb; j += KT, kp += KT * dq, kp2 += q2 ? KT * dq2 : 0) {
        vf a[RB][2];
        for (int r = 0; r < R; r++) {
            a[r][0] = init ? load(init + r * ldi + j) : splat(0);
            a[r][1] = init ? load(init + r * ldi + j + W) : splat(0);
        }
        dot_tile(R, a, q, dq, kp);
        if (q2 != NULL) dot_tile(R, a, q2, dq2, kp2);
        for (int r = 0; r < R; r++) {
            float *o = out + r * ldo + j;
            store(o, a[r][0] * factor);
            store(o + W, a[r][1] * factor);
            if (vm != NULL) {
                for (int64_t t = valid - j; t < KT; t++) o[t] = -INFINITY; /* padding keys */
                vm[r] = vmax(vm[r], vmax(load(o), load(o + W)));
            }
        }
    }
}

/* Exponentiate R rows of scores against the new running maxima; rescale what l and O hold so far. */
INLINE void softmax_step(const int R, float *S, int64_t kb, const vf *vm, float *mx, float *l, float *O, int64_t dv) {
    for (int r = 0; r < R; r++) {
        float *s = S + r * KB;
        float mold = mx[r], mnew = hmax(vm[r]);
        if (mold > mnew) mnew = mold;
        vf sum = splat(0), mm = splat(mnew);
        for (int64_t j = 0; j < kb; j += W) {
            vf e = vexp2(load(s + j) - mm);
            store(s + j, e);
            sum += e;
        }
        float scale = exp2f(mold - mnew); /* 0 on the first step, where mold = -inf */
        l[r] = l[r] * scale + hsum(sum);
        mx[r] = mnew;
        if (scale != 1.0f)
            for (int64_t c = 0; c < dv; c++) O[r * dv + c] *= scale;
    }
}

/* O (R rows) += P V over kb keys: P = S (R x kb), v (kb x dv). */
INLINE void accumulate(const int R, const float *S, const float *v, int64_t kb, int64_t dv, float *O) {
    int64_t c = 0;
    for (; c + 2 * W <= dv; c += 2 * W) {
        vf a[RB][2];
        for (int r = 0; r < R; r++) a[r][0] = load(O + r * dv + c), a[r][1] = load(O + r * dv + c + W);
        const float *vp = v + c;
        for (int64_t j = 0; j < kb; j++, vp += dv) {
            vf v0 = load(vp), v1 = load(vp + W);
            for (int r = 0; r < R; r++) {
                vf b = splat(S[r * KB + j]);
                a[r][0] += b * v0;
                a[r][1] += b * v1;
            }
        }
        for (int r = 0; r < R; r++) store(O + r * dv + c, a[r][0]), store(O + r * dv + c + W, a[r][1]);
    }
    if (c < dv) { /* one vector left */
        vf a[RB];
        for (int r = 0; r < R; r++) a[r] = load(O + r * dv + c);
        const float *vp = v + c;
        for (int64_t j = 0; j < kb; j++, vp += dv) {
            vf v0 = load(vp);
            for (int r = 0; r < R; r++) a[r] += splat(S[r * KB + j]) * v0;
        }
        for (int r = 0; r < R; r++) store(O + r * dv + c, a[r]);
    }
}

/* Where the factors come from: precomputed bias rows (windows grouped), else the factors themselves. */
typedef struct {
    const float *bias, *pq, *pkp;
    int64_t ldb, rank;
} positional_t;

/* One softmax step of R query rows over keys [j0, j0 + kb): scores, exp2, P V. */
INLINE void row_block(const int R, const float *q, int64_t dq, const float *kp, const float *v, positional_t p,
                      int64_t kb, int64_t valid, int64_t dv, float *S, float *mx, float *l, float *O) {
    vf vm[RB];
    const float log2e = 1.44269504088896341f; /* log2 units: exp(x) = 2^(x log2 e) */
    dots(R, q, dq, kp, p.pq, p.rank, p.pkp, kb, p.bias, p.ldb, S, KB, log2e, valid, vm);
    softmax_step(R, S, kb, vm, mx, l, O, dv);
    accumulate(R, S, v, kb, dv, O);
}

/* Positional bias rows p_q . p_k for R query rows and all mt keys (no scaling, no mask). */
INLINE void bias_rows(const int R, const float *pq, int64_t rank, const float *pkp, int64_t mt, float *out) {
    dots(R, pq, rank, pkp, NULL, 0, NULL, mt, NULL, 0, out, mt, 1.0f, mt, NULL);
}

typedef struct {
    const float *q, *kp, *v, *pq, *pkp;
    float *o;
    const int64_t *wins, *rows; /* optional: the windows to process and the query rows to compute (NULL: all) */
    int64_t batch, heads, n, nq, m, mt, d, rank, dv, qblocks, group, items, next;
    int failed;
} job_t;

#if RB == 12
#define BIG_ROWS(call_with_R)                                                                                         \
    case 12: call_with_R(12); break;                                                                                  \
    case 11: call_with_R(11); break;                                                                                  \
    case 10: call_with_R(10); break;                                                                                  \
    case 9: call_with_R(9); break;                                                                                    \
    case 8: call_with_R(8); break;                                                                                    \
    case 7: call_with_R(7); break;
#elif RB == 6
#define BIG_ROWS(call_with_R)
#else
#error "BY_ROWS has cases for RB = 6 or 12 only"
#endif

#define BY_ROWS(call_with_R, rows)                                                                                    \
    switch (rows < RB ? rows : RB) { /* a constant R per call: registers, unrolled loops */                          \
    BIG_ROWS(call_with_R)                                                                                             \
    case 6: call_with_R(6); break;                                                                                    \
    case 5: call_with_R(5); break;                                                                                    \
    case 4: call_with_R(4); break;                                                                                    \
    case 3: call_with_R(3); break;                                                                                    \
    case 2: call_with_R(2); break;                                                                                    \
    default: call_with_R(1); break;                                                                                   \
    }

/* Query rows first..first+rows (row stride dq; through the index idx unless NULL) regrouped RB at a time as
 * [c][RB] (missing rows zero): the dot loop then reads every row's channel c from one pointer at fixed offsets
 * instead of keeping RB row pointers in registers. */
static void interleave(const float *q, const int64_t *idx, int64_t first, int64_t rows, int64_t dq, float *out) {
    for (int64_t r0 = 0; r0 < rows; r0 += RB, out += RB * dq) {
        const float *row[RB];
        for (int r = 0; r < RB; r++)
            row[r] = r0 + r < rows ? q + (idx ? idx[first + r0 + r] : first + r0 + r) * dq : NULL;
        for (int64_t c = 0; c < dq; c++)
            for (int r = 0; r < RB; r++) out[c * RB + r] = row[r] ? row[r][c] : 0.0f;
    }
}

typedef struct {
    float *B, *S, *O, *Q, *P; /* bias rows QB x mt, scores RB x KB, output QB x dv, q QB x d, p_q QB x rank */
} scratch_t;

/* One work item: QB query rows of one head, for a group of batch items (windows) that share its positional bias
 * rows. */
static void work_item(const job_t *J, int64_t item, scratch_t w) {
    float *B = w.B, *S = w.S, *O = w.O;
    int64_t per_head = J->qblocks * ((J->batch + J->group - 1) / J->group);
    int64_t h = item / per_head, rest = item % per_head;
    int64_t i0 = (rest % J->qblocks) * QB, b0 = (rest / J->qblocks) * J->group;
    int64_t rows = J->nq - i0 < QB ? J->nq - i0 : QB;
    int64_t b1 = b0 + J->group < J->batch ? b0 + J->group : J->batch;
    int64_t n = J->n, m = J->m, mt = J->mt, d = J->d, rank = J->rank, dv = J->dv;
    /* Bias rows pay when windows share them; a lone window adds the factors' product inside its own scores. */
    int grouped = rank > 0 && b1 - b0 > 1;
    const float *pkp = rank > 0 ? J->pkp + h * mt * rank : NULL, *pq = w.P;
    if (rank > 0) interleave(J->pq + h * n * rank, J->rows, i0, rows, rank, w.P);
    if (grouped) {
        for (int64_t r0 = 0; r0 < rows; r0 += RB) {
#define BIAS(R) bias_rows(R, pq + r0 * rank, rank, pkp, mt, B + r0 * mt)
            BY_ROWS(BIAS, rows - r0)
#undef BIAS
        }
    }
    float mx[QB], l[QB];
    for (int64_t b = b0; b < b1; b++) {
        int64_t bh = (J->wins ? J->wins[b] : b) * J->heads + h;
        const float *q = w.Q, *kp = J->kp + bh * mt * d, *v = J->v + bh * mt * dv;
        interleave(J->q + bh * n * d, J->rows, i0, rows, d, w.Q);
        for (int64_t r = 0; r < rows; r++) mx[r] = -INFINITY, l[r] = 0;
        memset(O, 0, sizeof(float) * rows * dv);
        for (int64_t j0 = 0; j0 < mt; j0 += KB) {
            int64_t kb = mt - j0 < KB ? mt - j0 : KB;
            for (int64_t r0 = 0; r0 < rows; r0 += RB) {
                positional_t p = {NULL, NULL, NULL, mt, rank};
                if (grouped) {
                    p.bias = B + r0 * mt + j0;
                } else if (rank > 0) {
                    p.pq = pq + r0 * rank;
                    p.pkp = pkp + j0 * rank;
                }
#define STEP(R)                                                                                                       \
    row_block(R, q + r0 * d, d, kp + j0 * d, v + j0 * dv, p, kb, m - j0, dv, S, mx + r0, l + r0, O + r0 * dv)
                BY_ROWS(STEP, rows - r0)
#undef STEP
            }
        }
        for (int64_t r = 0; r < rows; r++) {
            float inv = 1.0f / l[r], *out = J->o + (bh * n + (J->rows ? J->rows[i0 + r] : i0 + r)) * dv;
            for (int64_t c = 0; c < dv; c++) out[c] = O[r * dv + c] * inv;
        }
    }
}

static void *worker(void *arg) {
    job_t *J = arg;
    scratch_t w = {J->rank > 0 ? malloc(sizeof(float) * QB * J->mt) : NULL, malloc(sizeof(float) * RB * KB),
                   malloc(sizeof(float) * QB * J->dv), malloc(sizeof(float) * QB * J->d),
                   malloc(sizeof(float) * QB * (J->rank > 0 ? J->rank : 1))};
    if (w.S == NULL || w.O == NULL || w.Q == NULL || w.P == NULL || (J->rank > 0 && w.B == NULL)) {
        __atomic_store_n(&J->failed, 1, __ATOMIC_RELAXED);
    } else {
        for (;;) {
            int64_t item = __atomic_fetch_add(&J->next, 1, __ATOMIC_RELAXED);
            if (item >= J->items) break;
            work_item(J, item, w);
        }
    }
    free(w.B);
    free(w.S);
    free(w.O);
    free(w.Q);
    free(w.P);
    return NULL;
}

/* softmax(q k^T + pq pk^T) v for batch x heads attention problems; see the layout at the top. pq / pkp may be NULL
 * (rank 0). Only the `count` windows listed in `wins` (of the `batch` the tensors hold) and, in each, the `kept`
 * query rows listed in `rows` (of n) are computed; either list may be NULL (all). Other output rows are left
 * untouched. Returns 0, or -1 when a worker could not allocate its scratch memory (then o holds nothing usable). */
int sst_attention_rows(const float *q, const float *kp, const float *v, const float *pq, const float *pkp, float *o,
                       int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t d, int64_t rank, int64_t dv,
                       const int64_t *wins, int64_t count, const int64_t *rows, int64_t kept, int threads) {
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (wins == NULL) count = batch;
    if (rows == NULL) kept = n;
    if (count < 1 || kept < 1) return 0;
    int64_t qblocks = (kept + QB - 1) / QB;
    /* Windows share a head's bias rows: the fewer groups, the less bias work, but at least 4 items per thread. */
    int64_t groups = (4 * threads + heads * qblocks - 1) / (heads * qblocks);
    if (rank == 0 || groups > count) groups = count;
    int64_t group = (count + groups - 1) / groups;
    groups = (count + group - 1) / group;
    job_t J = {q, kp, v, pq, pkp, o, wins, rows, count, heads, n, kept, m, (m + KT - 1) / KT * KT, d, rank, dv,
               qblocks, group, heads * qblocks * groups, 0, 0};
    if (threads > J.items) threads = (int)J.items;
    pthread_t pool[MAX_THREADS];
    int started = 1;
    for (; started < threads; started++)
        if (pthread_create(&pool[started], NULL, worker, &J) != 0) break; /* fewer threads: still correct */
    worker(&J);
    for (int i = 1; i < started; i++) pthread_join(pool[i], NULL);
    return J.failed ? -1 : 0;
}

/* All windows, all query rows. */
int sst_attention(const float *q, const float *kp, const float *v, const float *pq, const float *pkp, float *o,
                  int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t d, int64_t rank, int64_t dv,
                  int threads) {
    return sst_attention_rows(q, kp, v, pq, pkp, o, batch, heads, n, m, d, rank, dv, NULL, 0, NULL, 0, threads);
}

/* The packing the caller must use: floats per vector (v's width is a multiple of it) and keys per tile. */
int sst_attention_vector(void) { return W; }
int sst_attention_key_tile(void) { return KT; }
