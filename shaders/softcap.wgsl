// softcap.wgsl: a value capped at `cap`, as Gemma 2 caps its attention scores: cap * tanh(x /
// cap), which keeps small values and bends large ones towards +-cap; x itself for cap 0 (no
// cap). tanh is written through exp (1 - 2 / (e^2z + 1), saturating to +-1 for large |z|,
// never NaN), which every backend evaluates alike, as matrix.wgsl's GELU does. No bindings;
// included once by each kernel that includes attention_head.wgsl (attention_partial.wgsl,
// matrix.wgsl's decode variants) and by attention_weights.wgsl.

fn stable_tanh(z: f32) -> f32 {
    return 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
}

fn capped(x: f32, cap: f32) -> f32 {
    if (cap > 0.0) {
        return cap * stable_tanh(x / cap);
    }
    return x;
}
