/*
 * y = x W^T for a few rows of x (single-stream and small-batch decode), CPU, fp32 or bf16.
 *
 * At one token per step a linear layer is a matrix-vector product that reads every weight
 * once: it is bound by how fast the weights stream in. torch's CPU kernels (oneDNN / MKL) reach
 * 6 to 7 GB/s on this machine once the weights no longer fit the cache, a third of what one core
 * can read. Here each thread walks its share of W's rows in order, four at a time, and
 * prefetches the rows it will need a few iterations ahead, so that the memory system always has
 * loads in flight.
 *
 * x [m, k] and W [n, k] row-major of one element type (float32, or bfloat16 as uint16_t), y
 * [m, n] of the same type; accumulation in float32, bf16 results rounded to nearest even.
 * k must be a multiple of 16 and m at most MAX_M; the caller checks both.
 */
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define MAX_M 4
#define PREFETCH_ROWS 8

#ifdef HAVE_AVX512
/* Four rows of W against every row of x: 4 * m accumulators, one pass over k. */
#define DEFINE_ROWS4(SUFFIX, T)                                                                \
    static void rows4_##SUFFIX(const T *x, const T *w, T *y, int64_t m, int64_t n,            \
                               int64_t k, int64_t row) {                                       \
        __m512 acc[MAX_M][4];                                                                  \
        for (int64_t i = 0; i < m; i++)                                                        \
            for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();                       \
        const T *w0 = w + row * k;                                                             \
        const int64_t ahead = (row + PREFETCH_ROWS < n ? PREFETCH_ROWS : 0) * k;               \
        for (int64_t c = 0; c < k; c += 16) {                                                  \
            if (ahead && c % (64 / sizeof(T)) == 0)                                            \
                for (int r = 0; r < 4; r++) __builtin_prefetch(w0 + ahead + r * k + c, 0, 0);  \
            __m512 wv[4];                                                                      \
            for (int r = 0; r < 4; r++) wv[r] = load16_##SUFFIX(w0 + r * k + c);                   \
            for (int64_t i = 0; i < m; i++) {                                                  \
                const __m512 xv = load16_##SUFFIX(x + i * k + c);                                  \
                for (int r = 0; r < 4; r++) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]); \
            }                                                                                  \
        }                                                                                      \
        for (int64_t i = 0; i < m; i++) {                                                      \
            float four[4];                                                                     \
            _mm_storeu_ps(four, hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));            \
            for (int r = 0; r < 4; r++) store_##SUFFIX(y + i * n + row + r, four[r]);            \
        }                                                                                      \
    }
DEFINE_ROWS4(f32, float)
DEFINE_ROWS4(bf16, uint16_t)
#endif

/* One row of W against every row of x, plain C (the tail, and CPUs without AVX-512). */
#define DEFINE_ROW1(SUFFIX, T, LOAD, STORE)                                                    \
    static void row1_##SUFFIX(const T *x, const T *w, T *y, int64_t m, int64_t n, int64_t k,  \
                              int64_t row) {                                                   \
        const T *wr = w + row * k;                                                             \
        for (int64_t i = 0; i < m; i++) {                                                      \
            float lanes[16];                                                                   \
            memset(lanes, 0, sizeof(lanes));                                                   \
            for (int64_t c = 0; c < k; c += 16)                                                \
                for (int j = 0; j < 16; j++) lanes[j] += LOAD(x[i * k + c + j]) * LOAD(wr[c + j]); \
            float sum = 0.0f;                                                                  \
            for (int j = 0; j < 16; j++) sum += lanes[j];                                      \
            y[i * n + row] = STORE(sum);                                                       \
        }                                                                                      \
    }
#define ID(v) (v)
DEFINE_ROW1(f32, float, ID, ID)
DEFINE_ROW1(bf16, uint16_t, bf16_to_f32, f32_to_bf16)

#ifdef HAVE_AVX512
#define VECTOR_ROWS(SUFFIX)                                                                    \
    for (; row + 4 <= end; row += 4) rows4_##SUFFIX(x, w, y, m, n, k, row);
#else
#define VECTOR_ROWS(SUFFIX)
#endif

#define DEFINE_LINEAR(SUFFIX, T)                                                               \
    void small_batch_linear_##SUFFIX(const T *x, const T *w, T *y, int64_t m, int64_t n,      \
                                     int64_t k, int num_threads) {                             \
        _Pragma("omp parallel num_threads(num_threads) if (n * k >= (1 << 16))") {             \
            const int64_t threads = omp_threads(), me = omp_me();                              \
            /* Contiguous, 4-aligned shares of the rows: each thread streams its own range. */ \
            const int64_t per = ((n + threads - 1) / threads + 3) / 4 * 4;                     \
            int64_t row = me * per;                                                            \
            const int64_t end = row + per < n ? row + per : n;                                 \
            VECTOR_ROWS(SUFFIX)                                                                \
            for (; row < end; row++) row1_##SUFFIX(x, w, y, m, n, k, row);                     \
        }                                                                                      \
    }

#ifdef _OPENMP
#include <omp.h>
static inline int64_t omp_threads(void) { return omp_get_num_threads(); }
static inline int64_t omp_me(void) { return omp_get_thread_num(); }
#else
static inline int64_t omp_threads(void) { return 1; }
static inline int64_t omp_me(void) { return 0; }
#endif

DEFINE_LINEAR(f32, float)
DEFINE_LINEAR(bf16, uint16_t)
