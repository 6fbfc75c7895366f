//! The `tokenscope` binary on the real model: its machine interfaces and its errors.

mod common;

use std::process::Command;

use serde_json::Value;

fn tokenscope(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokenscope")).args(args).env("RAYON_NUM_THREADS", "2").output().expect("the binary runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn model() -> String {
    common::model_path().display().to_string()
}

#[test]
fn tokenize_prints_one_json_array() {
    let (code, out, _) = tokenscope(&["tokenize", "--model", &model(), "Hello world 12345"]);
    assert_eq!(code, 0);
    let ids: Vec<u32> = serde_json::from_str(out.trim()).expect("a JSON array");
    assert_eq!(ids, [19556, 905, 216, 33, 34, 35, 36, 37]);
}

#[test]
fn generate_jsonl_has_the_documented_keys() {
    let m = model();
    let args = [
        "generate",
        "--model",
        &m,
        "--jsonl",
        "--temperature",
        "0.8",
        "--seed",
        "3",
        "--max-tokens",
        "4",
        "--top-n",
        "7",
        "The capital of France is",
    ];
    let (code, out, err) = tokenscope(&args);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    let (last, steps) = lines.split_last().expect("lines");
    assert!(!steps.is_empty() && steps.len() <= 4);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], i);
        assert!(s["token_id"].is_u64() && s["text"].is_string());
        let c = s["candidates"].as_array().expect("candidates");
        assert_eq!(c.len(), 7);
        let logits: Vec<f64> = c.iter().map(|x| x["logit"].as_f64().expect("logit")).collect();
        assert!(logits.windows(2).all(|w| w[0] >= w[1]), "sorted by logit: {logits:?}");
        for x in c {
            assert!(x["token_id"].is_u64() && x["text"].is_string());
            let (p, pf) = (x["p"].as_f64().expect("p"), x["p_filtered"].as_f64().expect("p_filtered"));
            assert!((0.0..=1.0).contains(&p) && (0.0..=1.0).contains(&pf));
        }
        assert!(c.iter().any(|x| x["token_id"] == s["token_id"]), "the sampled token is a candidate");
    }
    for key in ["finish_reason", "prompt_tokens", "completion_tokens", "prefill_tok_s", "decode_tok_s"] {
        assert!(!last[key].is_null(), "summary has {key}: {last}");
    }
    assert_eq!(last["prompt_tokens"], 5);
    assert_eq!(last["completion_tokens"], steps.len());
    // The same seed streams the same tokens.
    let (_, again, _) = tokenscope(&args);
    assert_eq!(
        out.lines().map(|l| serde_json::from_str::<Value>(l).expect("json")["token_id"].clone()).collect::<Vec<_>>(),
        again.lines().map(|l| serde_json::from_str::<Value>(l).expect("json")["token_id"].clone()).collect::<Vec<_>>()
    );
}

#[test]
fn greedy_chat_answers_in_plain_text() {
    let m = model();
    let (code, out, err) =
        tokenscope(&["generate", "--model", &m, "--chat", "--temperature", "0", "--max-tokens", "12", "What is the capital of France?"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Paris") || !out.trim().is_empty(), "{out}");
}

#[test]
fn bench_json_reports_speeds() {
    let (code, out, err) = tokenscope(&["bench", "--model", &model(), "--json", "--runs", "1", "--decode-tokens", "4"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert!(v["prefill_tok_s"].as_f64().expect("number") > 0.0);
    assert!(v["decode_tok_s"].as_f64().expect("number") > 0.0);
    // 81 prompt tokens and 4 decoded: 85 positions of 30 layers' K and V, 192 floats each.
    assert_eq!(v["kv_cache_bytes"], 85 * 30 * 2 * 192 * 4, "{v}");
}

#[test]
fn bench_on_the_cpu_takes_a_half_float_cache() {
    let (code, out, err) = tokenscope(&["bench", "--model", &model(), "--json", "--runs", "1", "--decode-tokens", "4", "--kv-cache-f16"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["kv_cache_bytes"], 85 * 30 * 2 * 192 * 2, "two bytes a value: {v}");
}

/// The keys of a JSON object, sorted, recursively for the first element of arrays.
fn shape(v: &Value) -> String {
    match v {
        Value::Object(m) => format!("{{{}}}", m.iter().map(|(k, x)| format!("{k}:{}", shape(x))).collect::<Vec<_>>().join(",")),
        Value::Array(a) => format!("[{}]", a.first().map(shape).unwrap_or_default()),
        Value::Number(_) => "n".into(),
        Value::String(_) => "s".into(),
        Value::Bool(_) => "b".into(),
        Value::Null => "null".into(),
    }
}

#[test]
fn generate_on_the_gpu_gives_the_same_lines_as_on_the_cpu() {
    let m = model();
    let run = |backend: &str| {
        let args = [
            "generate",
            "--model",
            &m,
            "--backend",
            backend,
            "--jsonl",
            "--temperature",
            "0",
            "--max-tokens",
            "3",
            "--top-n",
            "5",
            "The capital of France is",
        ];
        let (code, out, err) = tokenscope(&args);
        assert_eq!(code, 0, "{backend}: {err}");
        out.lines().map(|l| serde_json::from_str::<Value>(l).expect("JSON line")).collect::<Vec<_>>()
    };
    let (gpu, cpu) = (run("gpu"), run("cpu-exact"));
    assert_eq!(gpu.len(), cpu.len());
    for (g, c) in gpu.iter().zip(&cpu) {
        assert_eq!(shape(g), shape(c), "the same keys and types");
        // Greedy: the GPU follows the exact math, so it picks the same tokens.
        assert_eq!(g["token_id"], c["token_id"]);
    }
}

/// `generate --run-ahead-sampled` on the GPU draws what it draws without (the same seed, the
/// same token ids), and its summary line counts every decode step after the first as run
/// ahead, taken or dropped; without it, sampled steps run nothing ahead.
#[test]
fn generate_runs_sampled_steps_ahead_on_the_gpu_only_when_asked_and_draws_the_same() {
    let m = model();
    let run = |ahead: bool| {
        let mut args = vec!["generate", "--model", &m, "--backend", "gpu", "--jsonl", "--temperature", "1.2", "--seed", "5"];
        args.extend(["--max-tokens", "4", "--top-n", "1", "The capital of France is"]);
        if ahead {
            args.push("--run-ahead-sampled");
        }
        let (code, out, err) = tokenscope(&args);
        assert_eq!(code, 0, "{err}");
        let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str::<Value>(l).expect("JSON line")).collect();
        let (last, steps) = lines.split_last().expect("lines");
        let ids: Vec<Value> = steps.iter().map(|s| s["token_id"].clone()).collect();
        let counts = (last["run_ahead_taken"].as_u64().expect("taken"), last["run_ahead_dropped"].as_u64().expect("dropped"));
        (ids, counts)
    };
    let (plain, plain_counts) = run(false);
    let (ahead, (taken, dropped)) = run(true);
    assert_eq!(ahead, plain, "the same draws");
    assert_eq!(plain_counts, (0, 0), "sampled steps wait for their logits unless asked");
    assert_eq!(taken + dropped, plain.len() as u64 - 1, "every decode step after the first was run ahead");
}

/// `tokenscope bench --backend gpu --json` on a short prompt, with `extra` arguments: its
/// one JSON object.
fn gpu_bench_json(extra: &[&str]) -> Value {
    let m = model();
    let mut args = vec!["bench", "--model", &m, "--backend", "gpu", "--json", "--runs", "1", "--prompt-tokens", "8"];
    args.extend_from_slice(extra);
    let (code, out, err) = tokenscope(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).expect("one JSON object")
}

#[test]
fn bench_on_the_gpu_reports_its_step_shape() {
    let v = gpu_bench_json(&["--decode-tokens", "2"]);
    for key in [
        "prefill_tok_s",
        "decode_tok_s",
        "dispatches_per_step",
        "passes_per_step",
        "submits_per_step",
        "readback_bytes_per_step",
        "gpu_bytes",
        "encode_s_per_step",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    assert_eq!(v["encode_ahead"], true, "{v}");
    assert_eq!(v["run_ahead_steps"], 1, "the default: {v}");
    assert_eq!(v["run_ahead_taken"], 1, "the second decode step ran ahead: {v}");
    assert_eq!(v["passes_per_step"], 1);
    assert_eq!(v["submits_per_step"], 1);
    // SmolLM2-135M has 30 layers: at most 4 dispatches each while the context is short (the
    // attention in the output projection's prologue) and 5 past it (split-K's part 1 of its
    // own, its chunks merged in the projection's prologue), plus the embedding lookup and
    // the LM head.
    assert!(v["dispatches_per_step"].as_u64().is_some_and(|n| n <= 4 * 30 + 2), "{v}");
    assert!(v["dispatches_per_step_long_context"].as_u64().is_some_and(|n| n <= 5 * 30 + 2), "{v}");
    assert_eq!(v["readback_bytes_per_step"], 49_152 * 4);
    assert_eq!(v["prompt_tokens"], 8);
    assert_eq!(v["gpu_kernels"], "subgroup reductions, 4 rows a subgroup, f32 KV cache", "lavapipe offers subgroups");
}

#[test]
fn bench_on_the_gpu_takes_a_half_float_cache_and_names_it() {
    let plain = gpu_bench_json(&["--decode-tokens", "1", "--context", "512"]);
    let half = gpu_bench_json(&["--decode-tokens", "1", "--context", "512", "--kv-cache-f16"]);
    assert_eq!(half["gpu_kernels"], "subgroup reductions, 4 rows a subgroup, f16 KV cache", "{half}");
    let plain_kernels = gpu_bench_json(&[
        "--decode-tokens",
        "1",
        "--no-subgroups",
        "--threads-per-row",
        "4",
        "--prefill-threads-per-row",
        "16",
        "--units-in-flight",
        "4",
        "--matrix-workgroup",
        "256",
        "--fused-attention-positions",
        "64",
        "--per-head-attention",
        "--run-ahead-steps",
        "3",
    ]);
    assert_eq!(plain_kernels["gpu_kernels"], "workgroup reductions, f32 KV cache", "{plain_kernels}");
    assert_eq!(plain_kernels["threads_per_row"], 4, "the shape asked for (lavapipe's own is 1)");
    assert_eq!(plain_kernels["matrix_workgroup"], 256, "the shape asked for (lavapipe's own is 64)");
    assert_eq!(plain_kernels["prefill_threads_per_row"], 16, "prefill's own shape, as asked for");
    assert_eq!(plain_kernels["units_in_flight"], 4, "as asked for");
    assert_eq!(plain_kernels["run_ahead_steps"], 3, "as asked for");
    assert_eq!(plain["units_in_flight"], 2, "the default");
    assert_eq!(plain["rows_per_subgroup"], 4, "lavapipe, a software adapter with subgroups, gets four rows a subgroup");
    assert_eq!(plain_kernels["rows_per_subgroup"], 1, "without subgroups, one row at a time");
    assert_eq!(plain["threads_per_row"], 1, "lavapipe, a software adapter, gets one thread per row");
    assert_eq!(plain["prefill_threads_per_row"], 1, "in prefill too");
    assert_eq!(plain["matrix_workgroup"], 64, "and 64 rows per workgroup");
    assert_eq!(plain_kernels["fused_attention_positions"], 64, "the limit asked for");
    assert_eq!(plain["fused_attention_positions"], 16, "the default limit");
    assert_eq!(plain_kernels["per_head_attention_layers"], 30, "every layer's projection per head, as asked for");
    assert_eq!(plain_kernels["dispatches_per_step"], 4 * 30 + 2, "still 4 dispatches a layer");
    assert_eq!(plain["per_head_attention_layers"], 0, "off by default");
    // 30 layers x K and V x 512 positions x 192 values: 4 bytes each, then 2.
    let saved = plain["gpu_bytes"].as_u64().expect("bytes") - half["gpu_bytes"].as_u64().expect("bytes");
    assert_eq!(saved, 30 * 2 * 512 * 192 * 2, "{plain} vs {half}");
}

/// `--profile` times every kernel of a decode step and gives each matrix kernel's achieved
/// weight bandwidth: its dispatches are the step's, and its weight bytes are the weights a
/// decoded token reads (within 2%: the GPU copies are padded; the embedding reads one row).
#[test]
fn bench_profile_gives_each_matrix_kernels_bandwidth() {
    let v = gpu_bench_json(&["--profile", "--decode-tokens", "1"]);
    let profile = v["profile"].as_array().expect("a profile");
    let dispatches: u64 = profile.iter().map(|k| k["dispatches"].as_u64().expect("dispatches")).sum();
    assert_eq!(Some(dispatches), v["dispatches_per_step"].as_u64(), "{v}");
    let bytes: u64 = profile.iter().map(|k| k["weight_bytes"].as_u64().expect("weight_bytes")).sum();
    let per_token = v["weight_bytes_per_token"].as_f64().expect("weight_bytes_per_token");
    assert!((bytes as f64 - per_token).abs() <= 0.02 * per_token, "{bytes} bytes profiled, {per_token} read per token");
    let matrix: Vec<&Value> = profile.iter().filter(|k| k["kernel"].as_str().is_some_and(|n| n.starts_with("matvec"))).collect();
    assert!(!matrix.is_empty(), "{v}");
    for k in matrix {
        let gb_s = k["weight_gb_per_s"].as_f64().expect("weight_gb_per_s");
        assert!(gb_s.is_finite() && gb_s > 0.0, "{k}");
    }
    // The step's GPU time is its kernels' (lavapipe has timestamp queries inside passes: the
    // kernels were timed in one ordinary pass), and an ordinary step's wall time comes with it.
    assert_eq!(v["profile_method"], "timestamps in one pass", "{v}");
    let kernel_seconds: f64 = profile.iter().map(|k| k["seconds"].as_f64().expect("seconds")).sum();
    let gpu = v["profile_gpu_s"].as_f64().expect("profile_gpu_s");
    assert!(gpu > 0.0 && (gpu - kernel_seconds).abs() <= 1e-9 * gpu.max(1.0), "{gpu} vs {kernel_seconds}");
    assert!(v["profile_step_wall_s"].as_f64().is_some_and(|w| w > 0.0), "{v}");
    // The whole step timed at its ends only, each kernel left out in turn (what it costs the
    // step), the floor of a dispatch that waits for the one before: numbers the bench prints,
    // present and positive where they are times. How they compare is the device's to say (on
    // this shared 2-core machine one run's noise can outweigh a kernel), so none is asserted.
    let step = v["profile_step_gpu_s"].as_f64().expect("the step's GPU time where timestamps are");
    assert!(step.is_finite() && step > 0.0, "{step} s the step at its ends");
    for k in profile {
        assert!(k["seconds_left_out"].as_f64().is_some_and(f64::is_finite), "{k}");
    }
    for key in ["profile_dispatch_floor_s", "profile_dispatch_floor_timed_each_s"] {
        let floor = v[key].as_f64().expect("a dispatch floor where timestamps are");
        assert!(floor.is_finite() && floor > 0.0, "{key}: {floor} s a dispatch");
    }
    // A readback alone, of the logits and of one word: each a round trip that took time.
    for key in ["profile_readback_s", "profile_readback_word_s"] {
        let readback = v[key].as_f64().expect("a readback's round trip");
        assert!(readback.is_finite() && readback > 0.0, "{key}: {readback} s");
    }
}

/// The steps of a `--jsonl` run (the summary line dropped).
fn jsonl_steps(args: &[&str]) -> Vec<Value> {
    let (code, out, err) = tokenscope(args);
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    lines.pop();
    lines
}

#[test]
fn force_takes_the_given_tokens_and_continues_from_them() {
    let m = model();
    let base = ["generate", "--model", &m, "--jsonl", "--temperature", "0", "--max-tokens", "5", "The capital of France is"];
    let plain = jsonl_steps(&base);
    // Force step 1 to the runner-up of that step, and step 3 to token 42.
    let runner_up = plain[1]["candidates"][1]["token_id"].as_u64().expect("id");
    let f1 = format!("1:{runner_up}");
    let forced = jsonl_steps(&[&base[..], &["--force", &f1, "--force", "3:42"]].concat());
    assert_eq!(forced.len(), 5);
    assert_eq!(forced[0]["token_id"], plain[0]["token_id"]);
    assert_eq!(
        (forced[1]["token_id"].as_u64(), forced[1]["forced"].as_bool(), forced[1]["rank"].as_u64()),
        (Some(runner_up), Some(true), Some(1))
    );
    assert_eq!((forced[3]["token_id"].as_u64(), forced[3]["forced"].as_bool()), (Some(42), Some(true)));
    assert_eq!(forced[2]["forced"], false);
    assert!(forced[1]["surprisal_bits"].is_null(), "greedy: the runner-up had p = 0");
    // Step 1's distribution is the same; what follows the forced token is not.
    assert_eq!(forced[1]["candidates"], plain[1]["candidates"]);
    assert_ne!(forced[2]["candidates"], plain[2]["candidates"]);
}

#[test]
fn no_kv_cache_gives_the_same_tokens_recomputing_the_whole_sequence() {
    let m = model();
    let base = ["generate", "--model", &m, "--jsonl", "--temperature", "0.9", "--seed", "11", "--max-tokens", "6", "Once upon a time"];
    let cached = jsonl_steps(&base);
    let naive = jsonl_steps(&[&base[..], &["--no-kv-cache"]].concat());
    let field = |v: &[Value], k: &str| v.iter().map(|s| s[k].clone()).collect::<Vec<_>>();
    assert_eq!(field(&cached, "token_id"), field(&naive, "token_id"));
    assert_eq!(field(&cached, "candidates"), field(&naive, "candidates"));
    let tokens = |v: &[Value]| v.iter().map(|s| s["forward_tokens"].as_u64().expect("n")).collect::<Vec<_>>();
    assert_eq!(tokens(&cached)[1..], vec![1; cached.len() - 1]);
    assert_eq!(tokens(&naive), (0..naive.len() as u64).map(|k| 4 + k).collect::<Vec<_>>(), "the prompt is 4 tokens");
}

#[test]
fn sampler_order_is_chosen_on_the_command_line() {
    let m = model();
    let base = [
        "generate",
        "--model",
        &m,
        "--jsonl",
        "--temperature",
        "1.8",
        "--top-k",
        "0",
        "--top-p",
        "0.5",
        "--max-tokens",
        "1",
        "--seed",
        "1",
        "Hi",
    ];
    let first = jsonl_steps(&base);
    let last = jsonl_steps(&[&base[..], &["--sampler-order", "temperature-last"]].concat());
    // The nucleus of the sharper T = 1 distribution holds fewer tokens.
    let n = |v: &[Value]| v[0]["after_top_p"].as_u64().expect("n");
    assert!(n(&last) < n(&first), "temperature last keeps {} tokens, first {}", n(&last), n(&first));
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let m = model();
    let not_gguf = std::env::temp_dir().join("tokenscope-not-a-model.txt");
    std::fs::write(&not_gguf, "hello, I am text").expect("write");
    let nf = not_gguf.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["generate", "--model", &m, "--temperature", "-1", "hi"], "temperature"),
        (vec!["generate", "--model", &m, "--top-p", "7", "hi"], "top_p"),
        (vec!["generate", "--model", &m, "--top-n", "1000", "hi"], "top_n"),
        (vec!["generate", "--model", "/nonexistent/model.gguf", "hi"], "not found"),
        (vec!["generate", "--model", &nf, "hi"], "not a GGUF file"),
        (vec!["generate", "--model", &m, "--context", "4", "a prompt that is longer than four tokens"], "shorten the prompt"),
        (vec!["generate", "--model", &m, "--top-k", "many", "hi"], "invalid value"),
        (vec!["generate", "--model", &m, "--force", "2", "hi"], "STEP:TOKEN_ID"),
        (vec!["generate", "--model", &m, "--force", "1:99999999", "hi"], "outside the vocabulary"),
        (vec!["generate", "--model", &m, "--sampler-order", "sideways", "hi"], "temperature-last"),
        (vec!["generate", "--model", &m, "--context", "0", "hi"], "choose at least 2"),
        (vec!["generate", "--model", &m, "--context", "1000000000", "hi"], "exceeds the model's window of 8192"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--context", "1000000000", "hi"], "choose at most 8192"),
        (vec!["generate", "--model", &m, "--top-k", "-5", "hi"], "\"-5\" is not a whole number of 0 or more"),
        (vec!["generate", "--model", &m, "--max-tokens", "-1", "hi"], "not a whole number"),
        (vec!["bench", "--model", &m, "--runs", "-2"], "not a whole number"),
        (vec!["generate", "--model", &m, "--threads-per-row", "4", "hi"], "use them with --backend gpu"),
        (vec!["bench", "--model", &m, "--runs", "0"], "--runs 0 times nothing"),
        (vec!["bench", "--model", &m, "--no-encode-ahead"], "use them with --backend gpu"),
        (vec!["bench", "--model", &m, "--run-ahead-steps", "2"], "use them with --backend gpu"),
        (vec!["bench", "--model", &m, "--prompt-tokens", "0"], "--prompt-tokens 0 prefills nothing"),
        (vec!["bench", "--model", &m, "--context", "16", "--decode-tokens", "4"], "more than the context of 16"),
        (vec!["generate", "--model", &m, "--max-tokens", "3", "--force", "3:42", "hi"], "--force 3:42 is past --max-tokens 3"),
        (vec!["generate", "--model", &m, "--force", "1:42", "--force", "1:43", "hi"], "names step 1 twice"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--threads-per-row", "3", "hi"], "a power of two from 1 to 128, not 3"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--threads-per-row", "256", "hi"], "not 256"),
        (
            vec!["generate", "--model", &m, "--backend", "gpu", "--matrix-workgroup", "64", "--threads-per-row", "64", "hi"],
            "64 threads per matrix row need matrix workgroups of at least 128 threads",
        ),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--threads-per-row", "0", "hi"], "not 0"),
        (vec!["generate", "--model", &m, "--prefill-threads-per-row", "8", "hi"], "use them with --backend gpu"),
        (
            vec!["generate", "--model", &m, "--backend", "gpu", "--units-in-flight", "3", "hi"],
            "--units-in-flight must be one of [2, 4, 8], not 3",
        ),
        (
            vec!["generate", "--model", &m, "--backend", "gpu", "--prefill-threads-per-row", "6", "hi"],
            "--prefill-threads-per-row must be a power of two from 1 to 128, not 6",
        ),
        (vec!["generate", "--model", &m, "--matrix-workgroup", "256", "hi"], "use them with --backend gpu"),
        (vec!["generate", "--model", &m, "--rows-per-subgroup", "2", "hi"], "use them with --backend gpu"),
        (
            vec!["generate", "--model", &m, "--backend", "gpu", "--rows-per-subgroup", "3", "hi"],
            "--rows-per-subgroup must be one of [1, 2, 4], not 3",
        ),
        (
            vec!["generate", "--model", &m, "--backend", "gpu", "--rows-per-subgroup", "2", "--no-subgroups", "hi"],
            "--rows-per-subgroup above 1 needs subgroups (no --no-subgroups)",
        ),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--matrix-workgroup", "100", "hi"], "one of [64, 128, 256], not 100"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--matrix-workgroup", "512", "hi"], "not 512"),
        (vec!["generate", "--model", &m, "--fused-attention-positions", "64", "hi"], "use them with --backend gpu"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--fused-attention-positions", "257", "hi"], "0 to 256, not 257"),
        (vec!["generate", "--model", &m, "--split-k-chunk", "32", "hi"], "use them with --backend gpu"),
        (vec!["generate", "--model", &m, "--per-head-attention", "hi"], "use them with --backend gpu"),
        (vec!["bench", "--model", &m, "--backend", "gpu", "--run-ahead-steps", "4"], "run-ahead steps must be 1 to 3, not 4"),
        (vec!["bench", "--model", &m, "--backend", "gpu", "--run-ahead-steps", "0"], "not 0"),
        (vec!["bench", "--model", &m, "--run-ahead-steps", "2", "--no-run-ahead"], "cannot be used with"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--split-k-chunk", "0", "hi"], "--split-k-chunk must be 1 to 256, not 0"),
        (vec!["generate", "--model", &m, "--backend", "gpu", "--split-k-chunk", "512", "hi"], "not 512"),
    ];
    for (args, needle) in cases {
        let (code, _, err) = tokenscope(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_hostile_model_file_exits_2_naming_the_field_with_nothing_raw() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_hostile");
    for (file, needle) in [
        ("alignment-zero.gguf", "general.alignment"),
        ("block-count-max.gguf", "llama.block_count"),
        ("context-length-max.gguf", "llama.context_length"),
        ("rms-eps-nan.gguf", "layer_norm_rms_epsilon"),
        ("tensor-name-escapes.gguf", "\\u{1b}[2J"),
    ] {
        let path = dir.join(file).display().to_string();
        let (code, _, err) = tokenscope(&["generate", "--model", &path, "--context", "16", "hi"]);
        assert_eq!(code, 2, "{file}: {err}");
        assert!(err.contains(needle), "{file}: {err}");
        assert!(!err.contains('\u{1b}') && !err.contains("panicked"), "{file}: {err:?}");
    }
}

#[test]
fn a_model_that_computes_nan_exits_2_saying_its_weights_are_broken() {
    use candle_core::quantized::{GgmlDType, QTensor};
    let mut m = tokenscope::model::synthetic::SyntheticModel::new(&Default::default()).expect("model");
    let nan = candle_core::Tensor::full(f32::NAN, 64, &candle_core::Device::Cpu).expect("nan");
    m.set_tensor("output_norm.weight", QTensor::quantize(&nan, GgmlDType::F32).expect("f32"));
    let path = std::env::temp_dir().join(format!("tokenscope-nan-{}.gguf", std::process::id()));
    std::fs::write(&path, m.to_bytes().expect("bytes")).expect("write");
    // The exact backend: the fast one requantizes activations to 8 bits, which turns NaN into 0.
    let p = path.display().to_string();
    let (code, _, err) = tokenscope(&["generate", "--model", &p, "--backend", "cpu-exact", "--max-tokens", "2", "the"]);
    // bench says the same, with the same status.
    let (bench_code, _, bench_err) =
        tokenscope(&["bench", "--model", &p, "--backend", "cpu-exact", "--runs", "1", "--decode-tokens", "1", "--prompt-tokens", "4"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("produced NaN") && err.contains("choose another model file"), "{err}");
    assert_eq!(bench_code, 2, "{bench_err}");
    assert!(bench_err.contains("produced NaN"), "{bench_err}");
}

/// What is not a regular file is refused at once, in words (a FIFO used to block the read
/// forever), and a symlink loop is named as one, not as a missing file.
#[cfg(unix)]
#[test]
fn a_fifo_a_folder_or_a_symlink_loop_as_the_model_is_refused_in_words() {
    let dir = std::env::temp_dir().join(format!("tokenscope-odd-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("model.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    std::os::unix::fs::symlink(&b, &a).expect("symlink");
    std::os::unix::fs::symlink(&a, &b).expect("symlink");
    for (path, needle) in [(&fifo, "not a regular file"), (&dir, "is a folder"), (&a, "symbolic links")] {
        let t = std::time::Instant::now();
        let (code, _, err) = tokenscope(&["generate", "--model", &path.display().to_string(), "hi"]);
        assert_eq!(code, 2, "{}: {err}", path.display());
        assert!(err.contains(needle) && !err.contains("not found"), "{}: {err}", path.display());
        assert!(t.elapsed().as_secs() < 30, "{} took {:?}", path.display(), t.elapsed());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One generated token has no decode time: it is 0, never "-0.0".
#[test]
fn one_token_reports_no_negative_zero() {
    let (code, out, err) = tokenscope(&["generate", "--model", &model(), "--max-tokens", "1", "--jsonl", "hi"]);
    assert_eq!(code, 0, "{err}");
    let last: Value = serde_json::from_str(out.lines().last().expect("a last line")).expect("JSON");
    assert_eq!(last["completion_tokens"], 1, "{last}");
    assert!(!out.contains("-0.0"), "{last}");
    assert_eq!(last["decode_ms"].as_f64().map(f64::is_sign_negative), Some(false), "{last}");
}

/// `generate --beams N --jsonl`: one line per step with the live beams (at most N, each one
/// token longer than the step before), and a last line with every finished beam, best first;
/// `--beams 1` writes what greedy sampling writes; a width past 8 is refused in words.
#[test]
fn generate_with_beams_lists_the_live_beams_and_ranks_the_finished_ones() {
    let m = model();
    let prompt = "The capital of France is";
    let (code, out, err) = tokenscope(&["generate", "--model", &m, "--beams", "3", "--max-tokens", "4", "--jsonl", prompt]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    let (last, steps) = lines.split_last().expect("lines");
    assert!(!steps.is_empty());
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], i, "{s}");
        let live = s["beams"].as_array().expect("beams");
        assert!(live.len() <= 3, "{s}");
        for b in live {
            assert_eq!(b["token_ids"].as_array().map(Vec::len), Some(i + 1), "{b}");
            assert!(b["text"].is_string() && b["score"].is_f64(), "{b}");
        }
    }
    let beams = last["beams"].as_array().expect("finished beams");
    assert!(!beams.is_empty(), "{last}");
    for b in beams {
        for key in ["text", "token_ids", "logprob", "score", "finish_reason"] {
            assert!(!b[key].is_null(), "{key} in {b}");
        }
        assert!(b["logprob"].as_f64().is_some_and(|lp| lp < 0.0), "{b}");
    }
    let scores: Vec<f64> = beams.iter().map(|b| b["score"].as_f64().expect("score")).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    assert_eq!(last["text"], beams[0]["text"]);

    let text = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", &m, "--max-tokens", "8"];
        args.extend_from_slice(extra);
        args.push(prompt);
        let (code, out, err) = tokenscope(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    assert_eq!(text(&["--beams", "1"]), text(&["--temperature", "0"]), "one beam is greedy decoding");
    let (code, _, err) = tokenscope(&["generate", "--model", &m, "--beams", "9", prompt]);
    assert_ne!(code, 0);
    assert!(err.contains("beams must be between 1 and 8"), "{err}");
}

/// `generate --speculative self|lookup --jsonl`: each step line says what the draft proposed
/// and whether it was kept, the last line adds the draft counts; at temperature 0 the text is
/// plain greedy decoding's; `bench --speculative` reports both speeds; bad sizes are refused.
#[test]
fn generate_with_speculative_decoding_reports_drafts_and_keeps_greedy_text() {
    let m = model();
    let prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,";
    let greedy = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", &m, "--temperature", "0", "--max-tokens", "16", "--jsonl"];
        args.extend_from_slice(extra);
        args.push(prompt);
        let (code, out, err) = tokenscope(&args);
        assert_eq!(code, 0, "{err}");
        out.lines().map(|l| serde_json::from_str::<Value>(l).expect("JSON line")).collect::<Vec<_>>()
    };
    let plain = greedy(&[]);
    let ids = |lines: &[Value]| lines.iter().filter_map(|l| l["token_id"].as_u64()).collect::<Vec<_>>();
    for drafter in ["self", "lookup"] {
        let lines = greedy(&["--speculative", drafter, "--draft-tokens", "3", "--draft-layers", "12"]);
        assert_eq!(ids(&lines), ids(&plain), "{drafter}");
        let (last, steps) = lines.split_last().expect("lines");
        assert!(steps.iter().any(|s| s["draft"]["round"].is_u64()), "{drafter}: no step came from a round");
        for key in ["draft_tokens", "accepted_tokens", "acceptance_rate", "target_forward_passes"] {
            assert!(last[key].is_number(), "{key} in {last}");
        }
        let kept = steps.iter().filter(|s| s["draft"]["accepted"] == true).count() as u64;
        assert_eq!(last["accepted_tokens"].as_u64(), Some(kept), "{last}");
        assert!(last["draft_tokens"].as_u64().is_some_and(|d| d >= kept), "{last}");
    }
    // Counting repeats itself: the lookup keeps most drafts and needs fewer model passes.
    let lookup = greedy(&["--speculative", "lookup", "--draft-tokens", "4"]);
    let last = lookup.last().expect("summary");
    assert!(last["target_forward_passes"].as_u64().is_some_and(|p| p < 16), "{last}");

    let (code, out, err) =
        tokenscope(&["bench", "--json", "--model", &m, "--runs", "1", "--decode-tokens", "8", "--speculative", "lookup"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    for key in ["plain_decode_tok_s", "speculative_decode_tok_s", "speed_up", "acceptance_rate", "tokens_per_forward_pass"] {
        assert!(v["speculative"][key].is_number(), "{key} in {v}");
    }
    assert_eq!(v["speculative"]["same_tokens"], true, "{v}");

    for (args, words) in [
        (vec!["--speculative", "self", "--draft-tokens", "9"], "draft_tokens must be between 1 and 8"),
        (vec!["--speculative", "self", "--draft-layers", "31"], "at most the model's 30 layers"),
        (vec!["--speculative", "lookup", "--no-kv-cache"], "needs the KV cache"),
        (vec!["--speculative", "lookup", "--beams", "2"], "not to --beams"),
    ] {
        let mut all = vec!["generate", "--model", &m];
        all.extend(args);
        all.push(prompt);
        let (code, _, err) = tokenscope(&all);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(words), "{err}");
    }
}

/// `bench --prompt-file` reads at most the context's worth of text: a 64 MB file with a
/// 64-token context is refused by its tokens in words, a FIFO at once, bytes that are not
/// UTF-8 by name; a file that fits is read whole.
#[cfg(unix)]
#[test]
fn bench_reads_a_prompt_file_only_as_far_as_the_context() {
    let m = model();
    let dir = std::env::temp_dir().join(format!("tokenscope-prompts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let huge = dir.join("huge.txt");
    std::fs::write(&huge, "the cat sat on the mat. ".repeat(64 << 20 >> 5)).expect("write");
    let fifo = dir.join("prompt.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    let binary = dir.join("binary.txt");
    std::fs::write(&binary, [b'h', b'i', 0xff, 0xfe, b' ']).expect("write");
    let small = dir.join("small.txt");
    std::fs::write(&small, "The capital of France is").expect("write");
    for (path, needle) in [(&huge, "more than the context of 64"), (&fifo, "not a regular file"), (&binary, "is not UTF-8 text")] {
        let t = std::time::Instant::now();
        let (code, _, err) =
            tokenscope(&["bench", "--model", &m, "--context", "64", "--runs", "1", "--prompt-file", &path.display().to_string()]);
        assert_eq!(code, 2, "{}: {err}", path.display());
        assert!(err.contains(needle), "{}: {err}", path.display());
        assert!(t.elapsed().as_secs() < 30, "{} took {:?}", path.display(), t.elapsed());
    }
    let (code, out, err) = tokenscope(&[
        "bench",
        "--model",
        &m,
        "--context",
        "64",
        "--runs",
        "1",
        "--decode-tokens",
        "1",
        "--json",
        "--prompt-file",
        &small.display().to_string(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(v["prompt_tokens"], 5, "{v}");
}

/// Checks one --inspect step line: the attention rows are distributions over the prompt's 5
/// tokens and the steps before, and the lens's last layer is the step's own distribution.
fn check_inside(s: &Value) {
    let inside = &s["inside"];
    let positions = inside["positions"].as_u64().expect("positions") as usize;
    assert_eq!(positions, 5 + s["step"].as_u64().expect("step") as usize, "the 5 prompt tokens and the steps before");
    assert_eq!((inside["layers"].as_u64(), inside["heads"].as_u64(), inside["heads_per_kv_head"].as_u64()), (Some(30), Some(9), Some(3)));
    assert_eq!(inside["tokens"].as_array().expect("tokens").len(), positions, "a text for each position");
    assert_eq!(inside["tokens"][1], " capital", "the prompt's second token");
    let layers = inside["attention"].as_array().expect("attention");
    assert_eq!(layers.len(), 30);
    for heads in layers {
        let heads = heads.as_array().expect("heads");
        assert_eq!(heads.len(), 9);
        for row in heads {
            let row: Vec<f64> = row.as_array().expect("row").iter().map(|w| w.as_f64().expect("weight")).collect();
            assert_eq!(row.len(), positions);
            assert!((row.iter().sum::<f64>() - 1.0).abs() <= 1e-5, "a row sums to 1");
        }
    }
    let lens = inside["lens"].as_array().expect("lens");
    assert_eq!(lens.len(), 30);
    // The last layer is the step's own distribution at temperature 1.
    let last = &lens[29];
    assert_eq!(last["layer"], 30);
    for t in last["top"].as_array().expect("top") {
        let c = s["candidates"]
            .as_array()
            .expect("candidates")
            .iter()
            .find(|c| c["token_id"] == t["token_id"])
            .expect("a top-5 token is a candidate");
        assert_eq!(t["probability"], c["p_t1"], "{t} vs {c}");
    }
    assert_eq!(last["top"][0]["token_id"], s["candidates"][0]["token_id"]);
}

#[test]
fn inspect_adds_each_steps_attention_and_logit_lens_and_changes_nothing_else() {
    let m = model();
    let base =
        ["generate", "--model", &m, "--jsonl", "--temperature", "0.9", "--seed", "5", "--max-tokens", "3", "The capital of France is"];
    let plain = jsonl_steps(&base);
    let inspected = jsonl_steps(&[&base[..], &["--inspect"]].concat());
    assert_eq!(inspected.len(), plain.len());
    for (s, p) in inspected.iter().zip(&plain) {
        assert_eq!((&s["token_id"], &s["candidates"]), (&p["token_id"], &p["candidates"]), "--inspect changes no step");
        check_inside(s);
    }
    // The GPU (lavapipe here) keeps the same inside: one step, for time.
    let gpu = jsonl_steps(&[&base[..9], &["1", "--backend", "gpu", "--inspect", base[10]]].concat());
    assert_eq!(gpu.len(), 1);
    check_inside(&gpu[0]);
    let (code, _, err) = tokenscope(&["generate", "--model", &m, "--inspect", "hi"]);
    assert_eq!(code, 2, "--inspect without --jsonl: {err}");
}
