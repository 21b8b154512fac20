/*
 * Shared by the engine's C kernels: bfloat16 <-> float32 (round to nearest even, as torch
 * converts), element loads and stores by type suffix (f32, bf16) for the kernels' macros and,
 * where the compiler targets AVX-512, 16-lane loads widened to float32 and a four-way
 * horizontal sum.
 */
#ifndef PERFLAB_KERNELS_H
#define PERFLAB_KERNELS_H

#include <stdint.h>

static inline float bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}
/* Inputs are finite: no NaN handling. */
static inline uint16_t f32_to_bf16(float x) {
    union { float f; uint32_t u; } v = {.f = x};
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

static inline float load_f32(const float *p) { return *p; }
static inline void store_f32(float *p, float x) { *p = x; }
static inline float load_bf16(const uint16_t *p) { return bf16_to_f32(*p); }
static inline void store_bf16(uint16_t *p, float x) { *p = f32_to_bf16(x); }

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__)
#include <immintrin.h>
#define HAVE_AVX512 1

static inline __m512 load16_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 load16_bf16(const uint16_t *p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

/* The four horizontal sums of a, b, c, d in one vector: summing each dot product's lanes on
 * its own costs several shuffles per dot; here four share them. */
static inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
    __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
    __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
    __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
#endif

/* The kernels that decode_stack.c chains (contracts in their own sources). */
#define DECLARE_KERNELS(SUFFIX, T)                                                             \
    void small_batch_linear_##SUFFIX(const T *x, const T *w, T *y, int64_t m, int64_t n,      \
                                     int64_t k, int num_threads);                              \
    void fused_add_rms_norm_##SUFFIX(const T *x, T *residual, const T *weight, T *out,        \
                                     int64_t rows, int64_t h, float eps, int has_residual);    \
    int paged_decode_attention_##SUFFIX(                                                       \
        const T *q, const T *kv_cache, const int64_t *block_tables, int64_t block_table_stride, \
        const int64_t *seq_lens, T *out, int64_t num_seqs, int64_t num_heads,                  \
        int64_t num_kv_heads, int64_t head_dim, int64_t num_blocks, int64_t block_size,        \
        float scale, float v_scale, int num_threads);                                          \
    void silu_and_mul_##SUFFIX(const T *x, T *out, int64_t rows, int64_t inter, int num_threads);
DECLARE_KERNELS(f32, float)
DECLARE_KERNELS(bf16, uint16_t)

#endif
