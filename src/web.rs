//! The JavaScript API (wasm32 only): load a model from bytes, run the one generation loop a
//! step at a time, change parameters between steps, stop, reset, branch at any step with a
//! chosen token, switch branches, re-shape or re-draw any past step's distribution exactly
//! (every step's logits are kept), and export or import a run. The lessons' worked example
//! runs through the same sampler without a model.
//!
//! Errors reach JavaScript as `Error` objects whose message says what to do. The TypeScript
//! declarations of everything that crosses the edge are derived from the Rust types (tsify).

use std::io::BufReader;

use serde::{Deserialize, Serialize};
use tsify::Tsify;
use wasm_bindgen::prelude::*;

use crate::backend::any::{BackendChoice, GpuChoice};
use crate::backend::cpu::CpuPrecision;
use crate::backend::gpu::browser_wait::GpuWait;
use crate::backend::gpu::device::{adapter_name, AdapterSeen};
use crate::backend::gpu::kernels::{ATTENTION_CHUNK, ROWS_PER_SUBGROUP_CHOICES};
use crate::backend::gpu::profile::PROFILE_STEPS;
use crate::backend::gpu::step::{check_run_ahead_steps, RunAheadCounts};
use crate::backend::gpu::StepProfile;
use crate::backend::{AnyBackend, Backend};
use crate::blob_reader::BlobReader;
use crate::error::{Error, ErrorName};
use crate::generation::beam::{BeamParams, BeamSearch};
use crate::generation::generate::{Event, GenerateParams, Generation};
use crate::generation::run::{RecordedModel, Run, RunRecord};
use crate::model::{Config, HeaderCheck, Model, WeightsSummary};
use crate::sampler::{self, SamplerRng, SamplingParams};
use crate::tokenizer::{PromptFormat, Tokenizer};

/// Bytes a model file is read in at a time while its header is parsed (tensors are read
/// whole, one range each).
const READ_CHUNK: usize = 1 << 20;

/// What `loadModel` reports.
#[derive(Serialize, Tsify)]
struct ModelInfo {
    config: Config,
    /// The weights in figures: parameters, bytes, storage types.
    weights: WeightsSummary,
    /// Why chat mode cannot be used with this model (no chat template in the file, or one that
    /// does not compile), or `None` when it can.
    chat_unavailable: Option<String>,
    file_bytes: u64,
    backend: String,
    device: String,
    context_len: usize,
}

/// Options of `start`.
#[derive(Deserialize, Tsify)]
struct StartOptions {
    prompt: String,
    #[serde(default)]
    format: Option<PromptFormat>,
    #[serde(default)]
    params: GenerateParams,
}

/// Options of `startBeams`.
#[derive(Deserialize, Tsify)]
struct BeamStartOptions {
    prompt: String,
    #[serde(default)]
    format: Option<PromptFormat>,
    #[serde(default)]
    params: BeamParams,
}

/// Statistics for the page.
#[derive(Serialize, Tsify)]
#[tsify(rename = "EngineStats")]
struct Stats {
    position: usize,
    context_len: usize,
    kv_cache_bytes: usize,
    kv_bytes_per_value: usize,
    backend: String,
    device: String,
    /// GPU only: kernel dispatches of the next decode step (one compute pass, one submit).
    gpu_dispatches_per_step: Option<usize>,
    /// GPU only: mean milliseconds of the engine's own time encoding a decode step's commands
    /// (done while the GPU runs the step before); None before the first decode step.
    gpu_encode_ms_per_step: Option<f64>,
    /// GPU only: the kernel variants it runs, in words.
    gpu_kernels: Option<String>,
    /// GPU only: bytes of every buffer on the GPU (weights, KV cache, activations, logits).
    gpu_buffer_bytes: Option<u64>,
    /// GPU only: decode steps run ahead on the GPU's argmax since the model loaded, taken as
    /// run and dropped (another token came).
    gpu_run_ahead: Option<RunAheadCounts>,
}

/// What `profile` reports: the figures, and the same in words (the lines `bench --profile`
/// prints natively).
#[derive(Serialize, Tsify)]
struct ProfileReport {
    profile: StepProfile,
    lines: Vec<String>,
}

/// How often a token came up in repeated draws.
#[derive(Serialize, Tsify)]
struct DrawCount {
    token_id: u32,
    count: usize,
}

/// The engine behind the page: one model, and one run (with its branches) or beam search at
/// a time.
#[wasm_bindgen]
pub struct Engine {
    state: EngineState,
    /// The next WebGPU load's short context with the output projection per query head
    /// ([`Engine::set_per_head_attention`]), if asked.
    per_head_positions: Option<u32>,
    /// The next WebGPU load's most positions of attention in the output projection, if asked
    /// ([`Engine::set_fused_attention_positions`]; else the adapter's default).
    fused_positions: Option<u32>,
    /// Matrix rows a subgroup takes at once in the next WebGPU load, if asked
    /// ([`Engine::set_rows_per_subgroup`]; else the adapter's default).
    rows_per_subgroup: Option<u32>,
    /// Whether sampled steps also run the next step ahead on the GPU's argmax
    /// ([`Engine::set_run_ahead_sampled`]).
    run_ahead_sampled: bool,
    /// How WebGPU waits for the GPU, if asked ([`Engine::set_gpu_wait`]; else by the adapter).
    gpu_wait: Option<GpuWait>,
}

/// What the engine holds: nothing, or a model with what it is doing. (One engine lives per
/// page, so the variants' sizes are left unboxed.)
#[allow(clippy::large_enum_variant)]
enum EngineState {
    /// No model (at first, and after a load that failed).
    Empty,
    /// A model on its backend, its tokenizer, and its work.
    Loaded { backend: AnyBackend, tokenizer: Tokenizer, work: Work },
}

/// What a loaded model is doing.
#[allow(clippy::large_enum_variant)]
enum Work {
    /// Nothing yet, or since a reset.
    Idle,
    /// A run: the generation loop and the record of its branches and steps.
    Run { generation: Generation, run: Run },
    /// A beam search (instead of a run).
    Beams(BeamSearch),
}

/// An `Error` for JavaScript: its `name` is [`Error::name`] (`BadModel`, `NoGpu`, `GpuLost`,
/// `InvalidParams`, `PromptTooLong`, ...) for the page to act on, its `message` says what to do.
fn js_err(e: impl Into<Error>) -> JsValue {
    let e = e.into();
    let err = js_sys::Error::new(&e.to_string());
    err.set_name(e.name());
    err.into()
}

/// A call made before what it needs exists (no model, no run).
fn not_ready(what: &str) -> JsValue {
    js_err(Error::NotReady(what.to_string()))
}

fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsValue> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).map_err(|e| js_err(Error::backend(e)))
}

fn sampling_from(params: JsValue) -> Result<SamplingParams, JsValue> {
    serde_wasm_bindgen::from_value(params).map_err(|e| js_err(Error::InvalidParams(e.to_string())))
}

/// `n` draws (at most [`MAX_DRAWS`]) with a fresh random stream from `seed`, as counts.
fn counted_draws(logits: &[f32], context: &[u32], params: JsValue, n: usize, seed: u64) -> Result<JsValue, JsValue> {
    if n > MAX_DRAWS {
        return Err(js_err(Error::InvalidParams(format!("at most {MAX_DRAWS} draws at once"))));
    }
    let draws = sampler::draw_many(logits, context, &sampling_from(params)?, n, &mut SamplerRng::new(seed)).map_err(js_err)?;
    to_js(&draws.into_iter().map(|(token_id, count)| DrawCount { token_id, count }).collect::<Vec<_>>())
}

/// The most draws one call makes.
const MAX_DRAWS: usize = 1_000_000;

/// A WebGPU adapter's name from its `GPUAdapterInfo`'s vendor, architecture and description
/// (the empty ones left out; "unnamed adapter" where all are): the page's and the engine's one
/// way of naming it.
#[wasm_bindgen(js_name = adapterName)]
pub fn adapter_name_of(vendor: &str, architecture: &str, description: &str) -> String {
    adapter_name(&[vendor, architecture, description])
}

/// The distribution of a step given by its logits alone (the lessons' worked example:
/// five tokens and their logits), through the same sampler as every model step.
#[wasm_bindgen(js_name = distributionOf, unchecked_return_type = "Distribution")]
pub fn distribution_of(
    logits: Vec<f32>,
    #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue,
    top_n: usize,
) -> Result<JsValue, JsValue> {
    let d = sampler::distribution(&logits, &[], &sampling_from(params)?, top_n).map_err(js_err)?;
    to_js(&d)
}

/// `n` draws from the distribution of `logits` (no context) with a fresh random stream from
/// `seed`; the counts per token, most drawn first.
#[wasm_bindgen(js_name = drawManyOf, unchecked_return_type = "DrawCount[]")]
pub fn draw_many_of(
    logits: Vec<f32>,
    #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue,
    n: usize,
    seed: u64,
) -> Result<JsValue, JsValue> {
    counted_draws(&logits, &[], params, n, seed)
}

/// Checks a model file from its first bytes (`start`, a few MiB) and its full length
/// `file_len`, without its tensor data: `true` when only the data could still fail a load,
/// `false` when the header runs past `start` (no verdict), a `BadModel` error otherwise. The
/// worker calls it before it frees the model in use: a bad file is refused while the old
/// model stays, and a good one loads without two models in wasm memory at once (which never
/// shrinks).
/// The names the engine gives its errors, every [`ErrorName`]: what the page acts on, and how
/// it tells an engine error from a crash.
#[wasm_bindgen(js_name = errorNames, unchecked_return_type = "ErrorName[]")]
pub fn error_names() -> Result<JsValue, JsValue> {
    to_js(&ErrorName::ALL)
}

#[wasm_bindgen(js_name = checkModel)]
pub fn check_model(start: &[u8], file_len: f64) -> Result<bool, JsValue> {
    if !(file_len.is_finite() && file_len >= 0.0) {
        return Err(js_err(Error::InvalidParams(format!("file length {file_len} is not a byte count"))));
    }
    match Model::check_header(start, file_len as u64).map_err(js_err)? {
        HeaderCheck::Sound => Ok(true),
        HeaderCheck::Inconclusive => Ok(false),
    }
}

/// A kernel's WGSL as the engine compiles it.
#[derive(Serialize, Tsify)]
struct KernelSource {
    name: String,
    code: String,
}

/// Every GPU kernel's WGSL as the engine compiles it (templates expanded into their
/// variants): `make www` writes them out for the test that compiles each one in Chromium.
#[wasm_bindgen(js_name = shaderSources, unchecked_return_type = "KernelSource[]")]
pub fn shader_sources() -> Result<JsValue, JsValue> {
    let sources = crate::backend::gpu::kernels::all_shaders()
        .into_iter()
        .map(|s| Ok(KernelSource { code: s.code()?, name: s.name }))
        .collect::<crate::error::Result<Vec<_>>>()
        .map_err(js_err)?;
    to_js(&sources)
}

/// Reads an exported run (JSON text), checking its format and version.
#[wasm_bindgen(js_name = parseRun, unchecked_return_type = "RunRecord")]
pub fn parse_run(text: &str) -> Result<JsValue, JsValue> {
    to_js(&RunRecord::from_json(text).map_err(js_err)?)
}

/// The threaded engine's `initThreadPool(n)`: starts rayon's pool on `n` Web Workers sharing
/// the wasm memory (only in the build with atomics, served cross-origin isolated).
#[cfg(target_feature = "atomics")]
pub use wasm_bindgen_rayon::init_thread_pool;

/// Panics inside the engine on purpose, as an unforeseen bug would: the page's crash-recovery
/// test uses it to check that a trap leaves the page usable (a fresh worker and engine, the
/// last good model reloaded). Nothing else calls it.
#[wasm_bindgen(js_name = panicForTesting)]
pub fn panic_for_testing() {
    console_error_panic_hook::set_once();
    panic!("a panic on purpose (the crash-recovery test)");
}

#[wasm_bindgen]
impl Engine {
    /// A new engine with no model (installs the panic hook so panics reach the console).
    #[wasm_bindgen(constructor)]
    pub fn new() -> Engine {
        console_error_panic_hook::set_once();
        Engine {
            state: EngineState::Empty,
            per_head_positions: None,
            fused_positions: None,
            rows_per_subgroup: None,
            run_ahead_sampled: false,
            gpu_wait: None,
        }
    }

    /// Loads a GGUF model from its file onto `backend` (`"webgpu"`: our WGSL kernels through
    /// the browser's WebGPU, on the adapter the page found, `adapter` (its name reported as
    /// the device, tuned for a software adapter where it is one);
    /// `"cpu"`: our wasm SIMD kernels). `progress(done, total)` is called while
    /// the tensors are read. `context` caps the KV cache (tokens; 0 = the model's window);
    /// `kv_cache_f16` keeps its keys and values in half floats.
    /// The file is read in place, a range at a time ([`BlobReader`]; in a worker only): the
    /// wasm memory holds the weights, never a copy of the file. A failure leaves no model
    /// loaded.
    #[wasm_bindgen(js_name = loadModel, unchecked_return_type = "ModelInfo")]
    pub async fn load_model(
        &mut self,
        file: web_sys::Blob,
        progress: js_sys::Function,
        context: usize,
        #[wasm_bindgen(unchecked_param_type = "\"webgpu\" | \"cpu\"")] backend: String,
        #[wasm_bindgen(unchecked_param_type = "AdapterSeen | null")] adapter: JsValue,
        kv_cache_f16: bool,
    ) -> Result<JsValue, JsValue> {
        self.state = EngineState::Empty;
        let adapter_seen: Option<AdapterSeen> =
            serde_wasm_bindgen::from_value(adapter).map_err(|e| js_err(Error::InvalidParams(format!("the adapter: {e}"))))?;
        let report = move |done: u64, total: u64| {
            let _ = progress.call2(&JsValue::NULL, &JsValue::from_f64(done as f64), &JsValue::from_f64(total as f64));
        };
        let reader = BlobReader::new(file).map_err(|e| js_err(Error::Io { context: "cannot open the model file".into(), source: e }))?;
        let model = Model::read_streaming(BufReader::with_capacity(READ_CHUNK, reader), Box::new(report)).map_err(js_err)?;
        // A cap, not a demand: a model whose window is shorter gets its whole window.
        let ctx = if context == 0 { None } else { Some(context.min(model.config.context_len)) };
        let choice = match backend.as_str() {
            "cpu" => BackendChoice::Cpu { precision: CpuPrecision::Fast, kv_f16: kv_cache_f16 },
            "webgpu" => BackendChoice::Gpu(GpuChoice {
                adapter_seen,
                kv_f16: kv_cache_f16,
                per_head_attention: self.per_head_positions.is_some(),
                fused_attention_positions: self.per_head_positions.or(self.fused_positions),
                rows_per_subgroup: self.rows_per_subgroup,
                ..GpuChoice::default()
            }),
            other => return Err(js_err(Error::InvalidParams(format!("unknown backend {other:?}: use \"webgpu\" or \"cpu\"")))),
        };
        let weights = model.summary;
        let backend = AnyBackend::load(choice, &model.config, model.weights, ctx).await.map_err(js_err)?;
        if let (AnyBackend::Gpu(g), Some(how)) = (&backend, self.gpu_wait) {
            g.context().set_wait(how);
        }
        let info = backend.info();
        let out = ModelInfo {
            file_bytes: model.file_bytes,
            backend: info.name,
            device: info.device,
            context_len: backend.context_len(),
            config: model.config,
            weights,
            chat_unavailable: model.tokenizer.chat_support().err().map(str::to_string),
        };
        self.state = EngineState::Loaded { backend, tokenizer: model.tokenizer, work: Work::Idle };
        to_js(&out)
    }

    /// Starts a run: `{prompt, format: {mode: "chat" | "completion", system?}, params}` with
    /// OpenAI-style parameter names. Returns `{prompt_tokens}`.
    #[wasm_bindgen(unchecked_return_type = "{ prompt_tokens: number }")]
    pub fn start(&mut self, #[wasm_bindgen(unchecked_param_type = "StartOptions")] options: JsValue) -> Result<JsValue, JsValue> {
        let opts: StartOptions = serde_wasm_bindgen::from_value(options).map_err(|e| js_err(Error::InvalidParams(e.to_string())))?;
        let (backend, tokenizer, work) = self.loaded()?;
        let format = opts.format.unwrap_or(PromptFormat::Completion);
        let prompt = tokenizer.encode_prompt(&format, &opts.prompt).map_err(js_err)?;
        let n = prompt.len();
        let model = RecordedModel {
            name: String::new(),
            backend: backend.info().name,
            n_layers: backend.layers(),
            vocab_size: tokenizer.vocab_size(),
        };
        if let Some(spec) = &opts.params.speculative {
            spec.layers(backend.layers()).map_err(js_err)?;
        }
        let generation = Generation::new(prompt.clone(), opts.params.clone(), tokenizer, backend.context_len()).map_err(js_err)?;
        *work = Work::Run { generation, run: Run::new(opts.prompt, format, prompt, model, opts.params) };
        to_js(&serde_json::json!({ "prompt_tokens": n }))
    }

    /// Starts a beam search instead of a run: `{prompt, format, params: {width,
    /// length_penalty, max_tokens, stop}}`. Returns `{prompt_tokens}`; `beamStep` grows it.
    #[wasm_bindgen(js_name = startBeams, unchecked_return_type = "{ prompt_tokens: number }")]
    pub fn start_beams(&mut self, #[wasm_bindgen(unchecked_param_type = "BeamStartOptions")] options: JsValue) -> Result<JsValue, JsValue> {
        let opts: BeamStartOptions = serde_wasm_bindgen::from_value(options).map_err(|e| js_err(Error::InvalidParams(e.to_string())))?;
        let (backend, tokenizer, work) = self.loaded()?;
        let prompt = tokenizer.encode_prompt(&opts.format.unwrap_or(PromptFormat::Completion), &opts.prompt).map_err(js_err)?;
        let n = prompt.len();
        let search = BeamSearch::new(prompt, opts.params, tokenizer, backend.context_len()).map_err(js_err)?;
        *work = Work::Beams(search);
        to_js(&serde_json::json!({ "prompt_tokens": n }))
    }

    /// Grows the beam search by one token: `{type: "step", beams, finished, ...}` or
    /// `{type: "finished", beams, ...}` (best first).
    #[wasm_bindgen(js_name = beamStep, unchecked_return_type = "BeamEvent")]
    pub async fn beam_step(&mut self) -> Result<JsValue, JsValue> {
        let Ok((backend, tokenizer, Work::Beams(search))) = self.loaded() else {
            return Err(not_ready("no beam search is running: press Generate"));
        };
        let event = search.step(backend, tokenizer).await.map_err(js_err)?;
        to_js(&event)
    }

    /// Runs one step of the current branch; returns `{type: "step", ...}` or
    /// `{type: "finished", ...}`. With `keep_inside` (a view inside the step is open) the
    /// step's pass keeps its attention weights and residuals for [`Engine::take_inside`].
    #[wasm_bindgen(unchecked_return_type = "Event")]
    pub async fn step(&mut self, keep_inside: bool) -> Result<JsValue, JsValue> {
        let run_ahead_sampled = self.run_ahead_sampled;
        let Ok((backend, tokenizer, Work::Run { generation, run })) = self.loaded() else {
            return Err(not_ready("no generation is running: press Generate"));
        };
        generation.keep_inside(keep_inside);
        generation.run_ahead_sampled(run_ahead_sampled);
        let (event, logits) = generation.step_keeping_logits(backend, tokenizer).await.map_err(js_err)?;
        match (&event, logits) {
            (Event::Step(s), Some(logits)) => run.push_step(s.clone(), logits),
            (Event::Finished(f), _) => run.finish(f.clone()),
            _ => {}
        }
        to_js(&event)
    }

    /// Step `step` of the current branch seen from inside: its forward pass recomputed from
    /// the branch's tokens, keeping the attention weights of its last token, and with `lens`
    /// the logit lens (`generation::inspect`; the Attention view alone skips its 30 rows of
    /// the LM head). The run carries on as it would have.
    #[wasm_bindgen(unchecked_return_type = "StepInside")]
    pub async fn inspect(&mut self, step: usize, lens: bool) -> Result<JsValue, JsValue> {
        let Ok((backend, tokenizer, Work::Run { generation, .. })) = self.loaded() else {
            return Err(not_ready("no run to look inside: press Generate first"));
        };
        let inside = generation.inspect(backend, step, lens, tokenizer).await.map_err(js_err)?;
        to_js(&inside)
    }

    /// The latest step seen from inside, from what its own pass kept (`step(true)`), with
    /// `lens` the logit lens computed now: what `inspect` would give for it, without running
    /// its pass again. `undefined` where that step kept nothing (a speculative round's step,
    /// or taken already).
    #[wasm_bindgen(js_name = takeInside, unchecked_return_type = "StepInside | undefined")]
    pub async fn take_inside(&mut self, lens: bool) -> Result<JsValue, JsValue> {
        let Ok((backend, tokenizer, Work::Run { generation, .. })) = self.loaded() else {
            return Ok(JsValue::UNDEFINED);
        };
        match generation.take_inside(backend, lens, tokenizer).await.map_err(js_err)? {
            Some(inside) => to_js(&inside),
            None => Ok(JsValue::UNDEFINED),
        }
    }

    /// Branches at `step` of the current branch: the steps from there on are set aside (they
    /// stay in their branch), the KV cache is truncated to what stays, and the next `step()`
    /// takes `token_id` at that step. Returns the new branch as the run records it (its id,
    /// parent, fork step and the steps it shares with its parent): the page keeps no branch of
    /// its own making.
    #[wasm_bindgen(unchecked_return_type = "Branch")]
    pub fn fork(&mut self, step: usize, token_id: u32) -> Result<JsValue, JsValue> {
        let Ok((_, tokenizer, Work::Run { generation, run })) = self.loaded() else {
            return Err(not_ready("no run to branch: press Generate first"));
        };
        if token_id as usize >= tokenizer.vocab_size() {
            return Err(js_err(Error::InvalidParams(format!("token {token_id} is outside the vocabulary"))));
        }
        generation.rewind(step, tokenizer).map_err(js_err)?;
        generation.force_next(token_id);
        run.fork(step).map_err(js_err)?;
        to_js(run.current())
    }

    /// Makes branch `id` the current one: the next step continues after its last token (the
    /// KV cache keeps the prefix it shares with the branch before). Returns the branch.
    #[wasm_bindgen(js_name = switchBranch, unchecked_return_type = "Branch")]
    pub fn switch_branch(&mut self, id: usize) -> Result<JsValue, JsValue> {
        let Ok((_, tokenizer, Work::Run { generation, run })) = self.loaded() else {
            return Err(not_ready("no run to switch in"));
        };
        let branch = run.switch(id).map_err(js_err)?;
        generation.follow(&branch.tokens(), tokenizer);
        if branch.finish.is_some() {
            generation.cancel();
        }
        to_js(branch)
    }

    /// Changes the sampling parameters; they apply from the next step.
    #[wasm_bindgen(js_name = setParams)]
    pub fn set_params(&mut self, #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue) -> Result<(), JsValue> {
        let p = sampling_from(params)?;
        match self.loaded() {
            Ok((_, _, Work::Run { generation, .. })) => generation.set_sampling(p).map_err(js_err),
            _ => p.validate().map_err(js_err),
        }
    }

    /// How many decode steps greedy generation keeps submitted ahead on WebGPU, each on the
    /// GPU's argmax of the one before (1 by default, up to 3: more hides a longer readback
    /// round trip). The CPU backend runs nothing ahead and takes any valid count.
    #[wasm_bindgen(js_name = setRunAheadSteps)]
    pub fn set_run_ahead_steps(&mut self, steps: usize) -> Result<(), JsValue> {
        match self.loaded()? {
            (AnyBackend::Gpu(g), _, _) => g.set_run_ahead_steps(steps).map_err(js_err),
            (AnyBackend::Cpu(_), _, _) => check_run_ahead_steps(steps).map_err(js_err),
        }
    }

    /// How the WebGPU engine waits for the GPU (browser_wait.rs), from the next load on and
    /// for the model loaded now: `"busy"` (nudging the browser's GPU process every 0.25 ms,
    /// a task at a time between: a hardware adapter's default), `"timer"` (every 1 ms or
    /// more, on a timer: a software adapter's), `"plain"` (no nudges: the browser's own poll
    /// ends each wait, as before they came): for measuring what they buy. Anything else is
    /// refused in words at once; the CPU backend waits for nothing.
    #[wasm_bindgen(js_name = setGpuWait)]
    pub fn set_gpu_wait(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "\"busy\" | \"timer\" | \"plain\"")] how: String,
    ) -> Result<(), JsValue> {
        let how = GpuWait::named(&how).map_err(js_err)?;
        self.gpu_wait = Some(how);
        if let EngineState::Loaded { backend: AnyBackend::Gpu(g), .. } = &self.state {
            g.context().set_wait(how);
        }
        Ok(())
    }

    /// Whether sampled steps (not only greedy ones) run the next step ahead on WebGPU, on the
    /// GPU's argmax of the logits before, from the next step on: taken where the draw was the
    /// argmax, dropped otherwise, the same tokens either way (as `generate
    /// --run-ahead-sampled` does natively): for measuring it in the browser, where a
    /// readback's round trip is long. The CPU backend runs nothing ahead.
    #[wasm_bindgen(js_name = setRunAheadSampled)]
    pub fn set_run_ahead_sampled(&mut self, on: bool) {
        self.run_ahead_sampled = on;
    }

    /// Runs the next WebGPU load's decode steps over the first `positions` positions (1 to
    /// 256) with the output projection per query head (each workgroup one head's attention
    /// over one chunk, the feed-forward merging the heads' parts), as `bench
    /// --per-head-attention --fused-attention-positions N` does natively: for measuring it in
    /// the browser. A count out of range is refused at once.
    #[wasm_bindgen(js_name = setPerHeadAttention)]
    pub fn set_per_head_attention(&mut self, positions: u32) -> Result<(), JsValue> {
        if !(1..=ATTENTION_CHUNK as u32).contains(&positions) {
            return Err(js_err(Error::InvalidParams(format!(
                "per-head attention covers 1 to {ATTENTION_CHUNK} positions, not {positions}"
            ))));
        }
        self.per_head_positions = Some(positions);
        Ok(())
    }

    /// Runs the next WebGPU load's decode steps with attention inside the output projection
    /// up to `positions` positions (0 to 256; past them split-K), as `bench
    /// --fused-attention-positions N` does natively: for measuring it in the browser, where
    /// a hardware GPU runs split-K from the first step by default
    /// ([`crate::backend::gpu::kernels::BROWSER_FUSED_ATTENTION_POSITIONS`]; a software
    /// adapter up to 16 positions). With [`Engine::set_per_head_attention`], that one's count
    /// holds. A count that is not a whole number from 0 to 256 (a URL's `?fused=abc` is NaN
    /// here) is refused at once.
    #[wasm_bindgen(js_name = setFusedAttentionPositions)]
    pub fn set_fused_attention_positions(&mut self, positions: f64) -> Result<(), JsValue> {
        if positions.fract() != 0.0 || !(0.0..=ATTENTION_CHUNK as f64).contains(&positions) {
            return Err(js_err(Error::InvalidParams(format!(
                "attention inside the output projection covers 0 to {ATTENTION_CHUNK} positions, not {positions}"
            ))));
        }
        self.fused_positions = Some(positions as u32);
        Ok(())
    }

    /// Has the next WebGPU load's decode kernels take `rows` matrix rows a subgroup at once
    /// (1, 2 or 4; by default 1 on a GPU, 4 on a software adapter with subgroups), as `bench
    /// --rows-per-subgroup N` does natively: for measuring it in the browser. A count out of
    /// range is refused at once; more than 1 on a device without subgroups, at the load.
    #[wasm_bindgen(js_name = setRowsPerSubgroup)]
    pub fn set_rows_per_subgroup(&mut self, rows: u32) -> Result<(), JsValue> {
        if !ROWS_PER_SUBGROUP_CHOICES.contains(&rows) {
            return Err(js_err(Error::InvalidParams(format!(
                "a subgroup takes one of {ROWS_PER_SUBGROUP_CHOICES:?} matrix rows at once, not {rows}"
            ))));
        }
        self.rows_per_subgroup = Some(rows);
        Ok(())
    }

    /// Times one WebGPU decode step by kernel after `prompt` (completion mode), as `bench
    /// --profile` does natively ([`crate::backend::gpu::GpuBackend::profile_decode`]): the
    /// run so far is forgotten and the KV cache emptied, the prompt prefilled, three decode
    /// steps run (an ordinary one, the timed one, an ordinary one with its readback's wait not
    /// nudged: `PROFILE_STEPS`), and the cache emptied again, as
    /// `reset` leaves it. For the bench on a GPU machine: where a page's step spends its GPU
    /// time, kernel by kernel, in the browser itself.
    #[wasm_bindgen(unchecked_return_type = "ProfileReport")]
    pub async fn profile(&mut self, prompt: &str) -> Result<JsValue, JsValue> {
        let (backend, tokenizer, work) = self.loaded()?;
        let AnyBackend::Gpu(gpu) = backend else {
            return Err(js_err(Error::InvalidParams("the profile times WebGPU kernels: load the model on WebGPU".into())));
        };
        let tokens = tokenizer.encode_prompt(&PromptFormat::Completion, prompt).map_err(js_err)?;
        if tokens.is_empty() || tokens.len() + PROFILE_STEPS > gpu.context_len() {
            return Err(js_err(Error::InvalidParams(format!(
                "the profile needs a prompt of 1 to {} tokens, not {}",
                gpu.context_len().saturating_sub(PROFILE_STEPS),
                tokens.len()
            ))));
        }
        *work = Work::Idle;
        gpu.truncate(0);
        let profiled = match gpu.prefill(&tokens).await {
            Ok(_) => gpu.profile_decode(tokens[0]).await,
            Err(e) => Err(e),
        };
        gpu.truncate(0);
        let profile = profiled.map_err(js_err)?;
        to_js(&ProfileReport { lines: profile.lines(), profile })
    }

    /// The distribution of a step of the current branch re-shaped by other sampling
    /// parameters, exactly.
    #[wasm_bindgen(unchecked_return_type = "Distribution")]
    pub fn reshape(
        &self,
        step: usize,
        #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue,
        top_n: usize,
    ) -> Result<JsValue, JsValue> {
        let p = sampling_from(params)?;
        let (tokenizer, run) = self.current_run().ok_or_else(|| not_ready("no run yet"))?;
        let (logits, context) = run.step_input(step).map_err(js_err)?;
        let mut shaped = sampler::StepDistribution::new(logits, &context, &p, top_n).map_err(js_err)?;
        // A drafted step keeps the token its draft proposed among the candidates.
        let record = run.record();
        let proposed = record.branches.get(record.current).and_then(|b| b.steps.get(step)).and_then(|s| s.draft.as_ref()?.proposed);
        if let Some(token) = proposed {
            shaped.report_also(logits, token);
        }
        let mut d = shaped.distribution().clone();
        tokenizer.label(&mut d);
        to_js(&d)
    }

    /// `n` fresh draws (a new random stream from `seed`) from a step's filtered distribution
    /// under `params`: the counts per token, most drawn first.
    #[wasm_bindgen(js_name = drawMany, unchecked_return_type = "DrawCount[]")]
    pub fn draw_many(
        &self,
        step: usize,
        #[wasm_bindgen(unchecked_param_type = "SamplingParams")] params: JsValue,
        n: usize,
        seed: u64,
    ) -> Result<JsValue, JsValue> {
        let (_, run) = self.current_run().ok_or_else(|| not_ready("no run yet"))?;
        let (logits, context) = run.step_input(step).map_err(js_err)?;
        counted_draws(logits, &context, params, n, seed)
    }

    /// The run so far (every branch, every step's top candidates) as JSON text, naming the
    /// model `model_name`.
    #[wasm_bindgen(js_name = exportRun)]
    pub fn export_run(&self, model_name: &str) -> Result<String, JsValue> {
        let (_, run) = self.current_run().ok_or_else(|| not_ready("nothing to export yet: generate first"))?;
        let mut record = run.record().clone();
        record.model.name = model_name.to_string();
        record.to_json().map_err(js_err)
    }

    /// Text of a token, for labels.
    #[wasm_bindgen(js_name = tokenText)]
    pub fn token_text(&self, id: u32) -> String {
        match &self.state {
            EngineState::Loaded { tokenizer, .. } => tokenizer.token_text(id),
            EngineState::Empty => String::new(),
        }
    }

    /// Stops the running generation (the next step reports `cancelled`) or beam search (the
    /// next beam step reports its end, the live beams finished where they stood).
    pub fn stop(&mut self) {
        match self.loaded() {
            Ok((_, _, Work::Run { generation, .. })) => generation.cancel(),
            Ok((_, _, Work::Beams(search))) => search.cancel(),
            _ => {}
        }
    }

    /// Forgets the run and empties the KV cache.
    pub fn reset(&mut self) {
        if let Ok((backend, _, work)) = self.loaded() {
            *work = Work::Idle;
            backend.truncate(0);
        }
    }

    /// KV cache, context and backend figures.
    #[wasm_bindgen(unchecked_return_type = "EngineStats")]
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        let EngineState::Loaded { backend: b, .. } = &self.state else {
            return Err(not_ready("no model is loaded"));
        };
        let info = b.info();
        to_js(&Stats {
            position: b.position(),
            context_len: b.context_len(),
            kv_cache_bytes: b.kv_cache_bytes(),
            kv_bytes_per_value: info.kv_bytes_per_value,
            backend: info.name,
            device: info.device,
            gpu_kernels: info.gpu_kernels,
            gpu_dispatches_per_step: match b {
                AnyBackend::Gpu(g) => Some(g.dispatches_per_step()),
                AnyBackend::Cpu(_) => None,
            },
            gpu_encode_ms_per_step: match b {
                AnyBackend::Gpu(g) => g.encode_seconds_per_step().map(|s| s * 1e3),
                AnyBackend::Cpu(_) => None,
            },
            gpu_buffer_bytes: match b {
                AnyBackend::Gpu(g) => Some(g.step_shape().gpu_bytes),
                AnyBackend::Cpu(_) => None,
            },
            gpu_run_ahead: match b {
                AnyBackend::Gpu(g) => Some(g.run_ahead_counts()),
                AnyBackend::Cpu(_) => None,
            },
        })
    }

    /// The model's backend, tokenizer and work, or `NotReady` with no model.
    fn loaded(&mut self) -> Result<(&mut AnyBackend, &Tokenizer, &mut Work), JsValue> {
        match &mut self.state {
            EngineState::Loaded { backend, tokenizer, work } => Ok((backend, tokenizer, work)),
            EngineState::Empty => Err(not_ready("no model is loaded: load one first")),
        }
    }

    /// The tokenizer and the run, when a run is what the model is doing.
    fn current_run(&self) -> Option<(&Tokenizer, &Run)> {
        match &self.state {
            EngineState::Loaded { tokenizer, work: Work::Run { run, .. }, .. } => Some((tokenizer, run)),
            _ => None,
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}
