//! A model given as functions of the whole context (prompt and generated tokens) to the next
//! token's logits: one for the model, one for its self-draft. For engine tests that need
//! exact control over the distributions (beam search, speculative decoding).

use tokenscope::backend::{Backend, BackendInfo, Checked, Forward, Logits};

/// Logits after a context.
pub type LogitsFn = Box<dyn Fn(&[u32]) -> Vec<f32>>;

/// The toy backend. Its "KV cache" is the context itself.
pub struct Toy {
    /// The model.
    pub logits: LogitsFn,
    /// The self-draft (the model itself when none is given).
    pub draft: Option<LogitsFn>,
    /// Tokens appended so far.
    pub context: Vec<u32>,
    /// Passes of the model (prefill, decode, verify).
    pub passes: usize,
}

impl Toy {
    /// A toy over `logits`, drafting with `draft`.
    pub fn new(logits: impl Fn(&[u32]) -> Vec<f32> + 'static, draft: Option<LogitsFn>) -> Self {
        Toy { logits: Box::new(logits), draft, context: Vec::new(), passes: 0 }
    }
}

impl Backend for Toy {
    /// A pass of the model: the last token's logits (prefill, decode) or every token's
    /// (verify).
    async fn forward_checked(&mut self, input: Checked<'_>) -> tokenscope::Result<Forward> {
        self.passes += 1;
        let mut out = Vec::new();
        for &t in input.tokens() {
            self.context.push(t);
            if input.pass().logits == Logits::All {
                out.extend((self.logits)(&self.context));
            }
        }
        if input.pass().logits == Logits::Last {
            out = (self.logits)(&self.context);
        }
        Ok(Forward { logits: out, inspection: None, ran_ahead: false })
    }
    /// The self-draft's own function, whatever the layer count, uncounted in `passes`.
    async fn draft(&mut self, token: u32, _layers: usize) -> tokenscope::Result<Vec<f32>> {
        self.context.push(token);
        Ok(match &self.draft {
            Some(d) => d(&self.context),
            None => (self.logits)(&self.context),
        })
    }
    fn truncate(&mut self, len: usize) {
        self.context.truncate(len);
    }
    fn position(&self) -> usize {
        self.context.len()
    }
    fn context_len(&self) -> usize {
        256
    }
    fn layers(&self) -> usize {
        3
    }
    fn kv_cache_bytes(&self) -> usize {
        0
    }
    fn info(&self) -> BackendInfo {
        BackendInfo { name: "toy".into(), device: "test".into(), software: true, kv_bytes_per_value: 4, gpu_kernels: None }
    }
}
