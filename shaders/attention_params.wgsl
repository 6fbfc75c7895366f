// attention_params.wgsl: what both halves of split-K attention share (included by
// attention_partial.wgsl and attention_combine.wgsl): the chunk length (CHUNK, from
// constants.wgsl) and the head shape.
#include constants.wgsl

struct Params {
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_chunks: u32,
}
