//! One module per GPU op (matrix, attention, RoPE/KV write, embedding, post norm, LayerNorm,
//! argmax, short convolution, a mixture of experts' pick and sum): each owns its shader source and variant key, its dispatch (the buffers bound by
//! their WGSL names, the workgroup count) and the checks on its operands;
//! the uniform structs they write are in [`super::params`], the pipeline cache and the
//! encoder in [`super::kernels`], and each op's CPU twin test in tests/gpu_kernels.rs.

pub mod argmax;
pub mod attention;
pub mod attention_weights;
pub mod embedding;
pub mod experts;
pub mod layer_norm;
pub mod matrix;
pub mod norm_add;
pub mod rope_kv;
pub mod short_conv;

pub use attention::{attention_chunks, attention_parts_len, Attention, AttentionKernel, AttentionScope};
pub use attention_weights::AttentionWeightsKernel;
pub use experts::{ExpertKernel, ExpertPick, ExpertSum, Routing};
pub use layer_norm::LayerNorm;
pub use matrix::{
    own_bias_len, AttentionInput, CombineInput, ExpertPicks, GpuMatrix, HeadGains, HeadParts, HeadsInput, LinearOp, MatrixKernel,
    PostNormInput, QkvBiases, RopeKv, RowBands, WeightFormat, HEADS_MIN_BLOCK_COLUMNS, HEADS_THREADS_PER_ROW, MATMUL_TOKENS, MAX_GROUPS,
    MAX_HEAD_NORM_WIDTH, MAX_HEAD_PARTS,
};
pub use norm_add::PostNorm;
pub use rope_kv::{rope_table, RopeKvKernel, RopeKvOp};
pub use short_conv::ShortConv;
