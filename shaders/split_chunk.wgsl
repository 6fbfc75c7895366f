// split_chunk.wgsl: split-K attention's chunk length in positions, an override so the host
// can choose it per adapter (KernelOptions::split_chunk, `--split-k-chunk`), defaulting to
// constants.wgsl's SPLIT_K_CHUNK. Included by attention_params.wgsl (attention_partial.wgsl,
// attention_combine.wgsl) and matrix.wgsl's COMBINE prologue, which must agree on it: the
// host passes all three the same value. At most CHUNK (a chunk's scores live in `scores`).
override SPLIT: u32 = SPLIT_K_CHUNK;
