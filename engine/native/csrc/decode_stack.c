/*
 * A Llama-family decoder stack for 1..4 decode tokens in one call, CPU, float32 or bfloat16:
 * embedding, then per layer the residual add + RMSNorm, the fused qkv projection, RoPE, the
 * K/V write into the paged cache, paged decode attention, the output projection, the second
 * add + norm and the SwiGLU MLP, then the final norm.
 *
 * Why: at one token per step the torch model is about 120 operator dispatches of 3 to 5 us
 * each, plus the Python around them, against a few hundred microseconds of arithmetic. This
 * file calls the engine's other kernels (small_batch_linear, fused_add_rms_norm,
 * paged_decode_attention, silu_and_mul) with the same arguments the model's native custom ops
 * give them, and does the embedding, RoPE and the K/V write itself with the torch path's
 * rounding, so both paths agree to the last bit.
 *
 * The two element types share one body, decode_stack_body.h, included once per type with
 * T (the storage type), SFX (the symbol suffix) and IN / OUT (widen to, round from float32).
 * Built without -ffast-math and in ISO C mode (no FMA contraction), so x * c + y * s rounds
 * each product as torch's separate mul and add do.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* Where each layer's tensors sit in `layer_ptrs`, PTRS_PER_LAYER entries per layer. */
enum { INPUT_NORM, QKV_PROJ, O_PROJ, POST_NORM, GATE_UP_PROJ, DOWN_PROJ, KV_CACHE, PTRS_PER_LAYER };

/* The model's shape, in `dims`, in this order. */
enum { HIDDEN, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, INTERMEDIATE, NUM_BLOCKS, BLOCK_SIZE, NUM_DIMS };

int decode_stack_ptrs_per_layer(void) { return PTRS_PER_LAYER; }
int decode_stack_num_dims(void) { return NUM_DIMS; }

static inline float identity(float x) { return x; }

#define T float
#define SFX(name) name##_f32
#define IN(x) identity(x)
#define OUT(x) identity(x)
#include "decode_stack_body.h"
#undef T
#undef SFX
#undef IN
#undef OUT

#define T uint16_t
#define SFX(name) name##_bf16
#define IN(x) bf16_to_f32(x)
#define OUT(x) f32_to_bf16(x)
#include "decode_stack_body.h"
#undef T
#undef SFX
#undef IN
#undef OUT
