//! The JavaScript API (wasm32 only): load a model from bytes, run the one generation loop a
//! step at a time, change parameters between steps, stop, reset, and re-shape any past
//! step's distribution exactly (every step's logits are kept).
//!
//! Errors reach JavaScript as `Error` objects whose message says what to do.

use std::io::Cursor;

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::backend::cpu::{CpuBackend, CpuPrecision};
use crate::backend::gpu::{GpuBackend, GpuContext};
use crate::backend::{AnyBackend, Backend};
use crate::error::Error;
use crate::generate::{Event, GenerateParams, Generation};
use crate::model::{Config, Model};
use crate::sampler::{self, SamplingParams};
use crate::tokenizer::{PromptFormat, Tokenizer};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** Sampling parameters (OpenAI-style names). */
export interface SamplingParams {
  temperature?: number; top_k?: number; top_p?: number; min_p?: number; repetition_penalty?: number;
}
/** Everything that shapes one generation. */
export interface GenerateParams extends SamplingParams {
  max_tokens?: number; stop?: string[]; seed?: number; top_n?: number;
}
export type PromptFormat = { mode: "completion" } | { mode: "chat"; system?: string | null };
export interface StartOptions { prompt: string; format?: PromptFormat; params?: GenerateParams; }
export interface Candidate {
  token_id: number; logit: number; p: number; p_t1: number; p_filtered: number;
  cut_by: "top_k" | "top_p" | "min_p" | "greedy" | null;
}
export interface Distribution {
  candidates: Candidate[]; entropy_bits: number; after_top_k: number; after_top_p: number;
  after_min_p: number; vocab_size: number;
}
export interface Sample { token_id: number; rank: number; p: number; p_filtered: number; distribution: Distribution; }
export interface StepEvent {
  type: "step"; step: number; token_id: number; text: string; token_text: string; sample: Sample;
  forward_ms: number; sample_ms: number; position: number;
}
export interface FinishEvent {
  type: "finished"; finish_reason: "eos" | "stop" | "length" | "cancelled"; prompt_tokens: number;
  completion_tokens: number; prefill_ms: number; decode_ms: number; prefill_tok_s: number;
  decode_tok_s: number; text: string;
}
export interface ModelInfo {
  config: { n_layers: number; dim: number; ffn_dim: number; n_heads: number; n_kv_heads: number;
    head_dim: number; vocab_size: number; context_len: number; rope_base: number; rms_eps: number };
  file_bytes: number; backend: string; device: string; context_len: number;
}
export interface EngineStats { position: number; context_len: number; kv_cache_bytes: number; backend: string; device: string; }
"#;

/// Steps whose logits are kept for re-shaping (about 200 KB each for a 49k vocabulary).
const MAX_KEPT_STEPS: usize = 1024;

/// What `loadModel` reports.
#[derive(Serialize)]
struct ModelInfo {
    config: Config,
    file_bytes: u64,
    backend: String,
    device: String,
    context_len: usize,
}

/// Options of `start`.
#[derive(Deserialize)]
struct StartOptions {
    prompt: String,
    #[serde(default)]
    format: Option<PromptFormat>,
    #[serde(default)]
    params: GenerateParams,
}

/// A kept step: the logits it was sampled from and the context before it.
struct KeptStep {
    logits: Vec<f32>,
    context_len: usize,
}

/// Statistics for the page.
#[derive(Serialize)]
struct Stats {
    position: usize,
    context_len: usize,
    kv_cache_bytes: usize,
    backend: String,
    device: String,
}

/// The engine behind the page: one model, one generation at a time.
#[wasm_bindgen]
pub struct Engine {
    backend: Option<AnyBackend>,
    tokenizer: Option<Tokenizer>,
    generation: Option<Generation>,
    kept: Vec<KeptStep>,
}

fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsError> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).map_err(js_err)
}

#[wasm_bindgen]
impl Engine {
    /// A new engine with no model (installs the panic hook so panics reach the console).
    #[wasm_bindgen(constructor)]
    pub fn new() -> Engine {
        console_error_panic_hook::set_once();
        Engine { backend: None, tokenizer: None, generation: None, kept: Vec::new() }
    }

    /// Loads a GGUF model from its bytes onto `backend` (`"webgpu"`: our WGSL kernels through
    /// the browser's WebGPU, tuned for a software adapter when `software_adapter` is set;
    /// `"cpu"`: candle in wasm). `progress(done, total)` is called while
    /// the tensors are read. `context` caps the KV cache (tokens; 0 = the model's window).
    /// A failure leaves no model loaded.
    #[wasm_bindgen(js_name = loadModel, unchecked_return_type = "ModelInfo")]
    pub async fn load_model(
        &mut self,
        bytes: Vec<u8>,
        progress: js_sys::Function,
        context: usize,
        #[wasm_bindgen(unchecked_param_type = "\"webgpu\" | \"cpu\"")] backend: String,
        software_adapter: bool,
    ) -> Result<JsValue, JsError> {
        self.backend = None;
        self.tokenizer = None;
        self.generation = None;
        self.kept.clear();
        let mut report = |done: u64, total: u64| {
            let _ = progress.call2(&JsValue::NULL, &JsValue::from_f64(done as f64), &JsValue::from_f64(total as f64));
        };
        let model = Model::read(&mut Cursor::new(bytes), &mut report).map_err(js_err)?;
        let ctx = if context == 0 { None } else { Some(context) };
        let backend = match backend.as_str() {
            "cpu" => AnyBackend::Cpu(Box::new(CpuBackend::new(&model.config, model.weights, CpuPrecision::Fast, ctx).map_err(js_err)?)),
            "webgpu" => {
                let device = GpuContext::with_hint(software_adapter).await.map_err(js_err)?;
                AnyBackend::Gpu(Box::new(GpuBackend::on(device, &model.config, model.weights, ctx).await.map_err(js_err)?))
            }
            other => return Err(js_err(format!("unknown backend {other:?}: use \"webgpu\" or \"cpu\""))),
        };
        let info = backend.info();
        let out = ModelInfo {
            config: model.config,
            file_bytes: model.file_bytes,
            backend: info.name,
            device: info.device,
            context_len: backend.context_len(),
        };
        self.backend = Some(backend);
        self.tokenizer = Some(model.tokenizer);
        to_js(&out)
    }

    /// Starts a generation: `{prompt, format: {mode: "chat" | "completion", system?}, params}`
    /// with OpenAI-style parameter names. Returns `{prompt_tokens}`.
    #[wasm_bindgen(unchecked_return_type = "{ prompt_tokens: number }")]
    pub fn start(&mut self, #[wasm_bindgen(unchecked_param_type = "StartOptions")] options: JsValue) -> Result<JsValue, JsError> {
        let opts: StartOptions = serde_wasm_bindgen::from_value(options).map_err(|e| js_err(Error::InvalidParams(e.to_string())))?;
        let (backend, tokenizer) = self.loaded()?;
        let format = opts.format.unwrap_or(PromptFormat::Completion);
        let prompt = tokenizer.encode_prompt(&format, &opts.prompt).map_err(js_err)?;
        let n = prompt.len();
        let generation = Generation::new(prompt, opts.params, tokenizer, backend.context_len()).map_err(js_err)?;
        self.generation = Some(generation);
        self.kept.clear();
        to_js(&serde_json::json!({ "prompt_tokens": n }))
    }

    /// Runs one step; returns `{type: "step", ...}` or `{type: "finished", ...}`.
    #[wasm_bindgen(unchecked_return_type = "StepEvent | FinishEvent")]
    pub async fn step(&mut self) -> Result<JsValue, JsError> {
        let (Some(backend), Some(tokenizer), Some(generation)) = (self.backend.as_mut(), self.tokenizer.as_ref(), self.generation.as_mut())
        else {
            return Err(js_err("no generation is running: press Generate"));
        };
        let context_len = generation.tokens().len();
        let event = generation.step_keeping_logits(backend, tokenizer).await.map_err(js_err)?;
        if let (Event::Step(_), Some(logits)) = (&event.0, event.1) {
            if self.kept.len() < MAX_KEPT_STEPS {
                self.kept.push(KeptStep { logits, context_len });
            }
        }
        to_js(&event.0)
    }

    /// Changes the sampling parameters; they apply from the next step.
    #[wasm_bindgen(js_name = setParams)]
    pub fn set_params(&mut self, #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue) -> Result<(), JsError> {
        let p: SamplingParams = serde_wasm_bindgen::from_value(params).map_err(|e| js_err(Error::InvalidParams(e.to_string())))?;
        match self.generation.as_mut() {
            Some(g) => g.set_sampling(p).map_err(js_err),
            None => p.validate().map_err(js_err),
        }
    }

    /// The distribution of a past step re-shaped by other sampling parameters, exactly.
    #[wasm_bindgen(unchecked_return_type = "Distribution")]
    pub fn reshape(
        &self,
        step: usize,
        #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue,
        top_n: usize,
    ) -> Result<JsValue, JsError> {
        let p: SamplingParams = serde_wasm_bindgen::from_value(params).map_err(|e| js_err(Error::InvalidParams(e.to_string())))?;
        let kept = self.kept.get(step).ok_or_else(|| js_err(format!("step {step} is not kept")))?;
        let context = self.generation.as_ref().map(|g| &g.tokens()[..kept.context_len]).unwrap_or(&[]);
        let d = sampler::distribution(&kept.logits, context, &p, top_n).map_err(js_err)?;
        to_js(&d)
    }

    /// Text of a token, for labels.
    #[wasm_bindgen(js_name = tokenText)]
    pub fn token_text(&self, id: u32) -> String {
        self.tokenizer.as_ref().map(|t| t.token_text(id)).unwrap_or_default()
    }

    /// Stops the running generation; the next step reports `cancelled`.
    pub fn stop(&mut self) {
        if let Some(g) = self.generation.as_mut() {
            g.cancel();
        }
    }

    /// Forgets the generation and empties the KV cache.
    pub fn reset(&mut self) {
        self.generation = None;
        self.kept.clear();
        if let Some(b) = self.backend.as_mut() {
            b.truncate(0);
        }
    }

    /// KV cache, context and backend figures.
    #[wasm_bindgen(unchecked_return_type = "EngineStats")]
    pub fn stats(&self) -> Result<JsValue, JsError> {
        let Some(b) = self.backend.as_ref() else {
            return Err(js_err("no model is loaded"));
        };
        let info = b.info();
        to_js(&Stats {
            position: b.position(),
            context_len: b.context_len(),
            kv_cache_bytes: b.kv_cache_bytes(),
            backend: info.name,
            device: info.device,
        })
    }

    fn loaded(&self) -> Result<(&AnyBackend, &Tokenizer), JsError> {
        match (self.backend.as_ref(), self.tokenizer.as_ref()) {
            (Some(b), Some(t)) => Ok((b, t)),
            _ => Err(js_err("no model is loaded: load one first")),
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}
