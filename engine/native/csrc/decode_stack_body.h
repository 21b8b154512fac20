/*
 * The body of decode_stack.c for one element type: T, SFX, IN and OUT are defined by the
 * includer (no include guard: included once per type).
 *
 * Contract (checked by engine/model/decode_stack.py):
 *   layer_ptrs [num_layers * PTRS_PER_LAYER]: input norm weight [h], qkv weight
 *     [(heads + 2 kv_heads) * d, h], o weight [h, heads * d], post-attention norm weight [h],
 *     gate_up weight [2 * inter, h] (gate rows first), down weight [h, inter], KV cache
 *     [2, num_blocks, block_size, kv_heads, d]; all contiguous, of type T.
 *   embed [vocab, h]; final_norm [h]; cos_table and sin_table [max_position, d] in T, sin
 *     carrying rotate_half's sign (cat(-sin, sin)), as engine/model/llama.py's RotaryEmbedding.
 *   input_ids, positions, slot_mapping int64 [m]; block_tables int64 [m, table_stride];
 *   seq_lens int64 [m], each including the new token. out [m, h].
 * Returns 0, or -1 when a buffer could not be allocated (out is then undefined; the caches
 * may hold some of this step's K/V, which a retry overwrites).
 */

/* RoPE on one head: dst = x * cos + roll(x, d / 2) * sin, each product and the sum rounded
 * to T, as torch's three ops round them. */
static void SFX(rope_head)(const T *x, T *dst, const T *cos_row, const T *sin_row, int64_t d) {
    const int64_t half = d / 2;
    for (int64_t j = 0; j < d; j++) {
        const float rolled = IN(x[j < half ? j + half : j - half]);
        const float a = IN(OUT(IN(x[j]) * IN(cos_row[j])));
        const float b = IN(OUT(rolled * IN(sin_row[j])));
        dst[j] = OUT(a + b);
    }
}

int SFX(decode_stack)(const void *const *layer_ptrs, int64_t num_layers, const T *embed,
                      const T *final_norm, const T *cos_table, const T *sin_table,
                      const int64_t *input_ids, const int64_t *positions,
                      const int64_t *slot_mapping, const int64_t *block_tables,
                      int64_t table_stride, const int64_t *seq_lens, T *out, int64_t m,
                      const int64_t *dims, float eps, float scale, int num_threads) {
    const int64_t h = dims[HIDDEN], heads = dims[NUM_HEADS], kv_heads = dims[NUM_KV_HEADS];
    const int64_t d = dims[HEAD_DIM], inter = dims[INTERMEDIATE];
    const int64_t num_blocks = dims[NUM_BLOCKS], block_size = dims[BLOCK_SIZE];
    const int64_t q_width = heads * d, kv_width = kv_heads * d;
    const int64_t qkv_width = q_width + 2 * kv_width;
    const int64_t v_offset = num_blocks * block_size * kv_width; /* V half of the cache */
    T *buf = malloc(sizeof(T) * m * (3 * h + qkv_width + 2 * q_width + 3 * inter));
    if (buf == NULL) return -1;
    T *x = buf, *residual = x + m * h, *normed = residual + m * h, *qkv = normed + m * h;
    T *q = qkv + m * qkv_width, *attn = q + m * q_width, *gate_up = attn + m * q_width;
    T *act = gate_up + 2 * m * inter;

    for (int64_t i = 0; i < m; i++)
        memcpy(x + i * h, embed + input_ids[i] * h, sizeof(T) * h);
    for (int64_t l = 0; l < num_layers; l++) {
        const void *const *p = layer_ptrs + l * PTRS_PER_LAYER;
        T *cache = (T *)p[KV_CACHE];
        /* The first layer has no residual yet: its norm takes x and keeps x as the residual. */
        SFX(fused_add_rms_norm)(x, residual, p[INPUT_NORM], normed, m, h, eps, l > 0);
        SFX(small_batch_linear)(normed, p[QKV_PROJ], qkv, m, qkv_width, h, num_threads);
        for (int64_t i = 0; i < m; i++) {
            const T *row = qkv + i * qkv_width;
            const T *c = cos_table + positions[i] * d, *s = sin_table + positions[i] * d;
            for (int64_t hd = 0; hd < heads; hd++)
                SFX(rope_head)(row + hd * d, q + i * q_width + hd * d, c, s, d);
            T *k_slot = cache + slot_mapping[i] * kv_width;
            for (int64_t hd = 0; hd < kv_heads; hd++)
                SFX(rope_head)(row + q_width + hd * d, k_slot + hd * d, c, s, d);
            memcpy(k_slot + v_offset, row + q_width + kv_width, sizeof(T) * kv_width);
        }
        if (SFX(paged_decode_attention)(q, cache, block_tables, table_stride, seq_lens, attn, m,
                                        heads, kv_heads, d, num_blocks, block_size, scale, 1.0f,
                                        num_threads) != 0) {
            free(buf);
            return -1;
        }
        SFX(small_batch_linear)(attn, p[O_PROJ], x, m, h, q_width, num_threads);
        SFX(fused_add_rms_norm)(x, residual, p[POST_NORM], normed, m, h, eps, 1);
        SFX(small_batch_linear)(normed, p[GATE_UP_PROJ], gate_up, m, 2 * inter, h, num_threads);
        SFX(silu_and_mul)(gate_up, act, m, inter, num_threads);
        SFX(small_batch_linear)(act, p[DOWN_PROJ], x, m, h, inter, num_threads);
    }
    SFX(fused_add_rms_norm)(x, residual, final_norm, out, m, h, eps, 1);
    free(buf);
    return 0;
}
