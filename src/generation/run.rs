//! A run's history: every branch of one prompt, each a list of steps with their
//! distributions, and the logits kept so a past step can be re-shaped or re-drawn. The same
//! record is the export format (JSON, versioned), read back by [`RunRecord::from_json`].
//!
//! A branch starts as a copy of its parent's steps before the fork point, then the forced
//! token and whatever follows it. Branch 0 is the run as first generated.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::generation::generate::{Finish, GenerateParams, StepEvent};
use crate::tokenizer::PromptFormat;

/// `format` of an exported run.
pub const RUN_FORMAT: &str = "tokenscope-run";
/// `version` of the export format this build writes and reads.
pub const RUN_VERSION: u32 = 1;
/// Steps whose logits are kept for re-shaping, over all branches (about 200 KB each for a
/// 49k vocabulary); later steps are recorded but cannot be re-shaped.
pub const MAX_KEPT_LOGITS: usize = 1024;

/// The model a run was made with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct RecordedModel {
    /// File name or label.
    pub name: String,
    /// Backend name (`cpu-fast`, `gpu`, ...).
    pub backend: String,
    /// Transformer layers.
    pub n_layers: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
}

/// One branch of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Branch {
    /// Index in [`RunRecord::branches`].
    pub id: usize,
    /// The branch it was forked from (`None` for branch 0).
    pub parent: Option<usize>,
    /// The step whose token was forced to start it (0 for branch 0).
    pub fork_step: usize,
    /// Every step, the ones shared with the parent included.
    pub steps: Vec<StepEvent>,
    /// How it ended, once it has.
    pub finish: Option<Finish>,
}

impl Branch {
    /// The generated token ids.
    pub fn tokens(&self) -> Vec<u32> {
        self.steps.iter().map(|s| s.token_id).collect()
    }
}

/// An exported run: prompt, model, parameters and every branch with every step's top
/// candidates (token ids, texts, logits and probabilities).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct RunRecord {
    /// Always [`RUN_FORMAT`].
    pub format: String,
    /// [`RUN_VERSION`] when written by this build.
    pub version: u32,
    /// The prompt as typed.
    pub prompt: String,
    /// Chat or completion.
    pub prompt_format: PromptFormat,
    /// The prompt's token ids (template included).
    pub prompt_ids: Vec<u32>,
    /// The model.
    pub model: RecordedModel,
    /// The parameters the run started with (the sampling parameters in force at each step
    /// are the ones its distribution shows).
    pub params: GenerateParams,
    /// Every branch; branch 0 is the first.
    pub branches: Vec<Branch>,
    /// The branch shown when the run was exported.
    pub current: usize,
}

impl RunRecord {
    /// Serializes the run (pretty JSON).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| Error::InvalidParams(format!("cannot write the run: {e}")))
    }

    /// Reads an exported run, checking its format, version and structure.
    pub fn from_json(text: &str) -> Result<RunRecord> {
        let bad = |m: String| Error::InvalidParams(format!("not a tokenscope run file: {m}"));
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(RUN_FORMAT) => {}
            other => return Err(bad(format!("its format is {other:?}, expected {RUN_FORMAT:?}"))),
        }
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != RUN_VERSION as u64 {
            return Err(bad(format!("version {version} is not the version {RUN_VERSION} this page reads")));
        }
        let record: RunRecord = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        if record.branches.is_empty() || record.current >= record.branches.len() {
            return Err(bad("it has no branch to show".into()));
        }
        for (i, b) in record.branches.iter().enumerate() {
            let parent_ok = b.parent.is_none_or(|p| p < record.branches.len());
            let steps_ok = b.steps.iter().enumerate().all(|(k, s)| s.step == k);
            if b.id != i || !parent_ok || !steps_ok || b.fork_step > b.steps.len() {
                return Err(bad(format!("branch {i} is inconsistent")));
            }
        }
        Ok(record)
    }
}

/// A run in progress: its record and the kept logits of every step of every branch.
pub struct Run {
    record: RunRecord,
    /// `[branch][step]`: the logits the step was drawn from, shared between branches.
    logits: Vec<Vec<Option<Arc<Vec<f32>>>>>,
    kept: usize,
}

impl Run {
    /// A run with one empty branch.
    pub fn new(prompt: String, prompt_format: PromptFormat, prompt_ids: Vec<u32>, model: RecordedModel, params: GenerateParams) -> Run {
        let first = Branch { id: 0, parent: None, fork_step: 0, steps: Vec::new(), finish: None };
        let record = RunRecord {
            format: RUN_FORMAT.into(),
            version: RUN_VERSION,
            prompt,
            prompt_format,
            prompt_ids,
            model,
            params,
            branches: vec![first],
            current: 0,
        };
        Run { record, logits: vec![Vec::new()], kept: 0 }
    }

    /// The record, for export.
    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// The branch being generated or shown.
    pub fn current(&self) -> &Branch {
        &self.record.branches[self.record.current]
    }

    /// Records a step of the current branch with the logits it was drawn from.
    pub fn push_step(&mut self, event: StepEvent, logits: Vec<f32>) {
        let cur = self.record.current;
        let kept = (self.kept < MAX_KEPT_LOGITS).then(|| {
            self.kept += 1;
            Arc::new(logits)
        });
        self.record.branches[cur].steps.push(event);
        self.record.branches[cur].finish = None;
        self.logits[cur].push(kept);
    }

    /// Records how the current branch ended.
    pub fn finish(&mut self, finish: Finish) {
        let cur = self.record.current;
        self.record.branches[cur].finish = Some(finish);
    }

    /// Starts a branch from the current one that shares its steps before `step`; it becomes
    /// the current branch. Returns its id.
    pub fn fork(&mut self, step: usize) -> Result<usize> {
        let cur = self.record.current;
        let parent = &self.record.branches[cur];
        if step > parent.steps.len() {
            return Err(Error::InvalidParams(format!("step {step} is past the {} steps of this branch", parent.steps.len())));
        }
        let id = self.record.branches.len();
        let branch = Branch { id, parent: Some(cur), fork_step: step, steps: parent.steps[..step].to_vec(), finish: None };
        self.record.branches.push(branch);
        self.logits.push(self.logits[cur][..step].to_vec());
        self.record.current = id;
        Ok(id)
    }

    /// Makes branch `id` the current one.
    pub fn switch(&mut self, id: usize) -> Result<&Branch> {
        if id >= self.record.branches.len() {
            return Err(Error::InvalidParams(format!("there is no branch {id}")));
        }
        self.record.current = id;
        Ok(&self.record.branches[id])
    }

    /// The logits of a step of the current branch and the context before it (prompt and
    /// earlier generated tokens), for re-shaping.
    pub fn step_input(&self, step: usize) -> Result<(&[f32], Vec<u32>)> {
        let cur = self.record.current;
        let logits = self.logits[cur]
            .get(step)
            .and_then(|l| l.as_deref())
            .ok_or_else(|| Error::InvalidParams(format!("the logits of step {} are not kept", step + 1)))?;
        let mut context = self.record.prompt_ids.clone();
        context.extend(self.record.branches[cur].steps[..step].iter().map(|s| s.token_id));
        Ok((logits, context))
    }
}
