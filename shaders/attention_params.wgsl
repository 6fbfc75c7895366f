// attention_params.wgsl: what both halves of split-K attention share (included by
// attention_partial.wgsl and attention_combine.wgsl): the chunk lengths (CHUNK for one
// workgroup's whole attention, from constants.wgsl; SPLIT for split-K's chunks,
// split_chunk.wgsl) and the head shape.
#include constants.wgsl

#include split_chunk.wgsl

#include attention_struct.wgsl
