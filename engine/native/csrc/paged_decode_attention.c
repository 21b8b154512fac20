/*
 * Paged decode attention on the CPU, fp32: every decode query attends to its sequence's
 * context straight out of the block-table KV cache, without first gathering K and V into a
 * padded tensor (the torch path's index_select, which reads and writes every byte of context
 * once more than the attention itself needs, plus the padding to the longest context).
 *
 * Two element types, one body: float32, and bfloat16 (stored as uint16_t, widened to float32
 * by a 16-bit shift, computed in float32, rounded to nearest even on the way out).
 *
 * Layout (engine/model/attention.py): q and out [num_seqs, num_heads, head_dim]; kv_cache
 * [2, num_blocks, block_size, num_kv_heads, head_dim] (0 = K, 1 = V); block_tables int64
 * [num_seqs, block_table_stride]; seq_lens int64 [num_seqs], each the context length including
 * the query token, whose K/V are already in the cache. Query heads g*group .. g*group+group-1
 * share KV head g (grouped-query attention).
 *
 * Numerics follow HF's eager attention in fp32: scores = (q . k) * scale, softmax in fp32 with
 * the row maximum subtracted, then the probability-weighted sum of V, times v_scale.
 *
 * Work items are (sequence, KV head) pairs, spread over OpenMP threads. Built with -fopenmp,
 * this library links libgomp.so.1, the runtime torch has already loaded, so its threads are
 * torch's own and the two never oversubscribe the cores.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* Each of the `rows` rows of `scores` [rows, ctx] becomes its softmax (max subtracted). */
static void softmax_rows(float *scores, int64_t rows, int64_t ctx) {
    for (int64_t g = 0; g < rows; g++) {
        float *row = scores + g * ctx;
        float max = row[0];
        for (int64_t t = 1; t < ctx; t++) max = row[t] > max ? row[t] : max;
        for (int64_t t = 0; t < ctx; t++) row[t] = expf(row[t] - max);
        float sum = 0.0f;
        for (int64_t t = 0; t < ctx; t++) sum += row[t];
        const float inv = 1.0f / sum;
        for (int64_t t = 0; t < ctx; t++) row[t] *= inv;
    }
}

#ifdef HAVE_AVX512
static inline void prefetch_block(const void *p, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch((const char *)p + off, 0, 1);
}

/* As attend_<T>, for head_dim = 16 * CH: query heads four at a time, their queries and
 * accumulators held in registers across the whole context, the four dot products of a key
 * summed together by hsum4, and the next block prefetched while this one is read. A group of
 * fewer than four (or a remainder) repeats its last head and stores only the real ones. */
#define DEFINE_ATTEND_AVX512(SUFFIX, T, CH)                                                    \
    static void attend_avx512_##SUFFIX##_##CH(                                                 \
        const T *q, const T *k_cache, const T *v_cache, const int64_t *table, int64_t ctx,     \
        int64_t group, int64_t block_size, int64_t token_stride, float scale, float v_scale,   \
        float *scores, T *out) {                                                               \
        const int64_t head_dim = 16 * CH;                                                      \
        const int64_t block_bytes = block_size * token_stride * (int64_t)sizeof(T);            \
        const int64_t num_blocks = (ctx + block_size - 1) / block_size;                        \
        for (int64_t g0 = 0; g0 < group; g0 += 4) {                                            \
            int64_t heads[4];                                                                  \
            for (int j = 0; j < 4; j++) heads[j] = g0 + j < group ? g0 + j : group - 1;        \
            __m512 qv[4][CH];                                                                  \
            const __m512 sc = _mm512_set1_ps(scale);                                           \
            for (int j = 0; j < 4; j++)                                                        \
                for (int c = 0; c < CH; c++)                                                   \
                    qv[j][c] = _mm512_mul_ps(load16_##SUFFIX(q + heads[j] * head_dim + 16 * c),\
                                             sc);                                              \
            for (int64_t b = 0; b < num_blocks; b++) {                                         \
                if (b + 1 < num_blocks)                                                        \
                    prefetch_block(k_cache + table[b + 1] * block_size * token_stride,         \
                                   block_bytes);                                               \
                const int64_t start = b * block_size;                                          \
                const int64_t n = ctx - start < block_size ? ctx - start : block_size;         \
                const T *k = k_cache + table[b] * block_size * token_stride;                   \
                for (int64_t t = 0; t < n; t++, k += token_stride) {                           \
                    __m512 kv[CH];                                                             \
                    for (int c = 0; c < CH; c++) kv[c] = load16_##SUFFIX(k + 16 * c);          \
                    __m512 dot[4];                                                             \
                    for (int j = 0; j < 4; j++) {                                              \
                        dot[j] = _mm512_mul_ps(qv[j][0], kv[0]);                               \
                        for (int c = 1; c < CH; c++)                                           \
                            dot[j] = _mm512_fmadd_ps(qv[j][c], kv[c], dot[j]);                 \
                    }                                                                          \
                    float four[4];                                                             \
                    _mm_storeu_ps(four, hsum4(dot[0], dot[1], dot[2], dot[3]));                \
                    for (int j = 0; j < 4 && g0 + j < group; j++)                              \
                        scores[(g0 + j) * ctx + start + t] = four[j];                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        prefetch_block(v_cache + table[0] * block_size * token_stride, block_bytes);           \
        softmax_rows(scores, group, ctx);                                                      \
        for (int64_t g0 = 0; g0 < group; g0 += 4) {                                            \
            int64_t heads[4];                                                                  \
            for (int j = 0; j < 4; j++) heads[j] = g0 + j < group ? g0 + j : group - 1;        \
            __m512 acc[4][CH];                                                                 \
            for (int j = 0; j < 4; j++)                                                        \
                for (int c = 0; c < CH; c++) acc[j][c] = _mm512_setzero_ps();                  \
            for (int64_t b = 0; b < num_blocks; b++) {                                         \
                if (b + 1 < num_blocks)                                                        \
                    prefetch_block(v_cache + table[b + 1] * block_size * token_stride,         \
                                   block_bytes);                                               \
                const int64_t start = b * block_size;                                          \
                const int64_t n = ctx - start < block_size ? ctx - start : block_size;         \
                const T *v = v_cache + table[b] * block_size * token_stride;                   \
                for (int64_t t = 0; t < n; t++, v += token_stride) {                           \
                    __m512 vv[CH];                                                             \
                    for (int c = 0; c < CH; c++) vv[c] = load16_##SUFFIX(v + 16 * c);          \
                    for (int j = 0; j < 4; j++) {                                              \
                        const __m512 p = _mm512_set1_ps(scores[heads[j] * ctx + start + t]);   \
                        for (int c = 0; c < CH; c++)                                           \
                            acc[j][c] = _mm512_fmadd_ps(p, vv[c], acc[j][c]);                  \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            for (int j = 0; j < 4 && g0 + j < group; j++) {                                    \
                float lanes[16 * CH];                                                          \
                for (int c = 0; c < CH; c++)                                                   \
                    _mm512_storeu_ps(lanes + 16 * c,                                           \
                                     _mm512_mul_ps(acc[j][c], _mm512_set1_ps(v_scale)));       \
                for (int64_t d = 0; d < head_dim; d++)                                         \
                    store_##SUFFIX(out + (g0 + j) * head_dim + d, lanes[d]);                   \
            }                                                                                  \
        }                                                                                      \
    }
DEFINE_ATTEND_AVX512(f32, float, 2)
DEFINE_ATTEND_AVX512(f32, float, 4)
DEFINE_ATTEND_AVX512(f32, float, 8)
DEFINE_ATTEND_AVX512(bf16, uint16_t, 2)
DEFINE_ATTEND_AVX512(bf16, uint16_t, 4)
DEFINE_ATTEND_AVX512(bf16, uint16_t, 8)
#endif

/* One (sequence, KV head): scores [group, ctx] in one pass over K, softmax per query head,
 * then acc [group, head_dim] in one pass over V. q is widened into qf once. */
#define DEFINE_ATTEND(SUFFIX, T)                                                               \
    static void attend_##SUFFIX(const T *q, const T *k_cache, const T *v_cache,                \
                                const int64_t *table, int64_t ctx, int64_t group,              \
                                int64_t head_dim, int64_t block_size, int64_t token_stride,    \
                                float scale, float v_scale, float *scores, float *acc,         \
                                float *qf, float *kf, T *out) {                                \
        for (int64_t i = 0; i < group * head_dim; i++) qf[i] = load_##SUFFIX(q + i);          \
        for (int64_t start = 0; start < ctx; start += block_size) {                            \
            const int64_t block = table[start / block_size];                                   \
            const int64_t n = ctx - start < block_size ? ctx - start : block_size;             \
            const T *k = k_cache + block * block_size * token_stride;                          \
            for (int64_t t = 0; t < n; t++, k += token_stride) {                               \
                _Pragma("omp simd") for (int64_t d = 0; d < head_dim; d++) kf[d] =             \
                    load_##SUFFIX(k + d);                                                      \
                for (int64_t g = 0; g < group; g++) {                                          \
                    const float *qg = qf + g * head_dim;                                       \
                    float dot = 0.0f;                                                          \
                    _Pragma("omp simd reduction(+ : dot)") for (int64_t d = 0; d < head_dim;   \
                                                                d++) dot += qg[d] * kf[d];     \
                    scores[g * ctx + start + t] = dot * scale;                                 \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        softmax_rows(scores, group, ctx);                                                      \
        for (int64_t i = 0; i < group * head_dim; i++) acc[i] = 0.0f;                          \
        for (int64_t start = 0; start < ctx; start += block_size) {                            \
            const int64_t block = table[start / block_size];                                   \
            const int64_t n = ctx - start < block_size ? ctx - start : block_size;             \
            const T *v = v_cache + block * block_size * token_stride;                          \
            for (int64_t t = 0; t < n; t++, v += token_stride) {                               \
                _Pragma("omp simd") for (int64_t d = 0; d < head_dim; d++) kf[d] =             \
                    load_##SUFFIX(v + d);                                                      \
                for (int64_t g = 0; g < group; g++) {                                          \
                    const float p = scores[g * ctx + start + t];                               \
                    float *a = acc + g * head_dim;                                             \
                    _Pragma("omp simd") for (int64_t d = 0; d < head_dim; d++) a[d] +=         \
                        p * kf[d];                                                             \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        for (int64_t i = 0; i < group * head_dim; i++)                                         \
            store_##SUFFIX(out + i, acc[i] * v_scale);                                         \
    }


/* Tests set this to compare the portable path with the vector one on the same machine. */
static int force_portable = 0;
void paged_decode_attention_force_portable(int on) { force_portable = on; }

#ifdef HAVE_AVX512
#define VECTOR_CASE(SUFFIX, CH)                                                                \
    case 16 * CH:                                                                              \
        attend_avx512_##SUFFIX##_##CH(q, k_cache, v_cache, table, ctx, group, block_size,      \
                                      token_stride, scale, v_scale, scores, out);              \
        return;
#define VECTOR_PATH(SUFFIX)                                                                    \
    if (!force_portable) {                                                                     \
        switch (head_dim) {                                                                    \
            VECTOR_CASE(SUFFIX, 2)                                                             \
            VECTOR_CASE(SUFFIX, 4)                                                             \
            VECTOR_CASE(SUFFIX, 8)                                                             \
            default:                                                                           \
                break;                                                                         \
        }                                                                                      \
    }
#else
#define VECTOR_PATH(SUFFIX)
#endif

#define DEFINE_DISPATCH(SUFFIX, T)                                                             \
    static void attend_any_##SUFFIX(const T *q, const T *k_cache, const T *v_cache,            \
                                    const int64_t *table, int64_t ctx, int64_t group,          \
                                    int64_t head_dim, int64_t block_size, int64_t token_stride,\
                                    float scale, float v_scale, float *scores, float *acc,     \
                                    float *qf, float *kf, T *out) {                            \
        VECTOR_PATH(SUFFIX)                                                                    \
        attend_##SUFFIX(q, k_cache, v_cache, table, ctx, group, head_dim, block_size,          \
                        token_stride, scale, v_scale, scores, acc, qf, kf, out);               \
    }
#define ATTEND(SUFFIX) attend_any_##SUFFIX

/* Returns 0, or -1 when a work buffer could not be allocated (out is then incomplete). */
#define DEFINE_KERNEL(SUFFIX, T)                                                               \
    DEFINE_ATTEND(SUFFIX, T)                                                                   \
    DEFINE_DISPATCH(SUFFIX, T)                                                                 \
    int paged_decode_attention_##SUFFIX(                                                       \
        const T *q, const T *kv_cache, const int64_t *block_tables, int64_t block_table_stride, \
        const int64_t *seq_lens, T *out, int64_t num_seqs, int64_t num_heads,                  \
        int64_t num_kv_heads, int64_t head_dim, int64_t num_blocks, int64_t block_size,        \
        float scale, float v_scale, int num_threads) {                                         \
        const int64_t group = num_heads / num_kv_heads;                                        \
        const int64_t token_stride = num_kv_heads * head_dim;                                  \
        const T *v_base = kv_cache + num_blocks * block_size * token_stride;                   \
        int64_t max_ctx = 0;                                                                   \
        for (int64_t s = 0; s < num_seqs; s++)                                                 \
            max_ctx = seq_lens[s] > max_ctx ? seq_lens[s] : max_ctx;                           \
        const int64_t scratch = group * max_ctx + 2 * group * head_dim + head_dim;             \
        int failed = 0;                                                                        \
        _Pragma("omp parallel num_threads(num_threads) if (num_seqs * num_kv_heads > 1)") {    \
            float *buf = malloc(sizeof(float) * scratch);                                      \
            if (buf == NULL) {                                                                 \
                _Pragma("omp atomic write") failed = 1;                                        \
            }                                                                                  \
            _Pragma("omp for collapse(2) schedule(dynamic, 4)") for (int64_t s = 0;            \
                                                                    s < num_seqs; s++) {       \
                for (int64_t h = 0; h < num_kv_heads; h++) {                                   \
                    if (buf == NULL) continue;                                                 \
                    const int64_t offset = (s * num_heads + h * group) * head_dim;             \
                    float *scores = buf, *acc = buf + group * max_ctx;                         \
                    float *qf = acc + group * head_dim, *kf = qf + group * head_dim;           \
                    ATTEND(SUFFIX)(q + offset, kv_cache + h * head_dim, v_base + h * head_dim, \
                                   block_tables + s * block_table_stride, seq_lens[s], group,  \
                                   head_dim, block_size, token_stride, scale, v_scale, scores, \
                                   acc, qf, kf, out + offset);                                 \
                }                                                                              \
            }                                                                                  \
            free(buf);                                                                         \
        }                                                                                      \
        return failed ? -1 : 0;                                                                \
    }

DEFINE_KERNEL(f32, float)
DEFINE_KERNEL(bf16, uint16_t)
