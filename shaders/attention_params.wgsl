// attention_params.wgsl: what both halves of split-K attention share (included by
// attention_partial.wgsl and attention_combine.wgsl): the chunk length (CHUNK, from
// constants.wgsl) and the head shape.
#include constants.wgsl

#include attention_struct.wgsl
