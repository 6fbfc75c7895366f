//! The speculative-decoding options `generate` and `bench` share.

use tokenscope::generation::speculative::{Drafter, SpeculativeParams};

#[derive(clap::Args, Debug)]
pub struct SpeculativeArgs {
    /// Speculative decoding: draft tokens with the model's own first layers (self) or by
    /// looking the text's ending up earlier in the context (lookup), and check each draft
    /// in one pass (the same distribution as plain sampling).
    #[arg(long, value_enum, value_name = "DRAFTER")]
    speculative: Option<DrafterArg>,
    /// With --speculative: tokens drafted per round (1-8).
    #[arg(long, value_name = "K", default_value_t = 4, allow_negative_numbers = true, value_parser = super::count::<usize>)]
    draft_tokens: usize,
    /// With --speculative self: layers the draft runs (default: a third of the model's).
    #[arg(long, value_name = "L", allow_negative_numbers = true, value_parser = super::count::<usize>)]
    draft_layers: Option<usize>,
}

impl SpeculativeArgs {
    /// The engine's parameters, or `None` without `--speculative`.
    pub fn params(&self) -> Option<SpeculativeParams> {
        self.speculative.map(|d| SpeculativeParams {
            drafter: match d {
                DrafterArg::SelfDraft => Drafter::SelfDraft,
                DrafterArg::Lookup => Drafter::Lookup,
            },
            draft_tokens: self.draft_tokens,
            draft_layers: self.draft_layers,
        })
    }
}

/// `--speculative` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum DrafterArg {
    /// The model's first layers, then its LM head.
    #[value(name = "self")]
    SelfDraft,
    /// The continuation of the text's ending's last earlier occurrence.
    Lookup,
}
