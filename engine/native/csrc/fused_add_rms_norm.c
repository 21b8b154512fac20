/*
 * The residual add and RMSNorm of a pre-norm decoder layer in one pass (vLLM's
 * fused_add_rms_norm), CPU, float32 or bfloat16.
 *
 * Unfused, each norm is eight small torch ops (add, cast, pow, mean, add, rsqrt, mul, cast,
 * mul); at one token per step each costs its dispatch, not its arithmetic, and a tiny model's
 * step has nine norms.
 *
 * Per row of h elements, with the rounding of HF's LlamaRMSNorm in the element type T:
 *   residual = T(x + residual)            (or residual = x where there is none yet)
 *   out      = T(weight * T(residual * 1 / sqrt(mean(residual^2) + eps)))
 * computed in float32; bfloat16 values round to nearest even. Built without -ffast-math, so
 * 1 / sqrt is the correctly rounded division of the correctly rounded root, as torch's rsqrt.
 */
#include <math.h>
#include <stdint.h>

#include "kernels.h"

static inline float f32_in(float x) { return x; }
static inline float f32_out(float x) { return x; }

#define DEFINE_NORM(SUFFIX, T, IN, OUT)                                                        \
    void fused_add_rms_norm_##SUFFIX(const T *x, T *residual, const T *weight, T *out,        \
                                     int64_t rows, int64_t h, float eps, int has_residual) {   \
        for (int64_t i = 0; i < rows; i++) {                                                   \
            const T *xr = x + i * h;                                                           \
            T *rr = residual + i * h, *orow = out + i * h;                                     \
            float sum = 0.0f;                                                                  \
            for (int64_t j = 0; j < h; j++) {                                                  \
                const float r = has_residual ? IN(OUT(IN(xr[j]) + IN(rr[j]))) : IN(xr[j]);     \
                rr[j] = OUT(r);                                                                \
                sum += r * r;                                                                  \
            }                                                                                  \
            const float inv = 1.0f / sqrtf(sum / (float)h + eps);                              \
            for (int64_t j = 0; j < h; j++)                                                    \
                orow[j] = OUT(IN(weight[j]) * IN(OUT(IN(rr[j]) * inv)));                       \
        }                                                                                      \
    }

DEFINE_NORM(f32, float, f32_in, f32_out)
DEFINE_NORM(bf16, uint16_t, bf16_to_f32, f32_to_bf16)
