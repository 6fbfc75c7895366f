// step.wgsl: the per-step uniform every kernel that depends on the step reads (included with
// `#include step.wgsl`; one buffer written once per step). pos: the KV-cache position of the
// step's first token; n_tokens: tokens in the step (1 for decode, up to 64 in a prefill pass).
struct Step {
    pos: u32,
    n_tokens: u32,
    _pad0: u32,
    _pad1: u32,
}
