#!/usr/bin/env python3
"""Requantizes the default model with llama.cpp's own quantizer, into the formats people download.

    python3 scripts/requantize.py [--out models/requantized] [TYPE ...]

llama.cpp's `llama_model_quantize` is called through ctypes in the prebuilt libllama that
bench/setup-peers.sh installs (node-llama-cpp's linux-x64 binaries, pinned in bench/package.json):
no compiler and no llama.cpp source are needed. The Q4_1 model is dequantized and quantized again
(llama.cpp's `allow_requantize`), with llama.cpp's own mixes: Q4_K_M keeps some tensors in Q6_K,
and rows whose length is not a multiple of 256 (576 here) fall back to other types (Q4_K to
Q5_0, Q6_K to Q8_0, Q2_K and Q3_K to Q4_0, IQ4_XS and the IQ3 types to IQ4_NL, and both IQ4
files keep a few Q5_K), as in every K-quant file of this model people download. IQ3_M puts the
down projections in IQ3_S. No IQ3_XXS file is made: its mix keeps this model's only rows of
256-multiples (the down projections') in Q3_K and Q4_K, and llama.cpp refuses IQ3_XXS blocks
without an importance matrix, which this library cannot be given (src/gguf/iq3.rs's tests
hold IQ3_XXS to llama.cpp's own dequantizer instead). Quantizing is row by row and deterministic, so the
files' sha256 are checked against tests/fixtures/requantized.json, which holds llama.cpp's logits
on them (bench/make-requant-fixtures.mjs). Idempotent: a file already in place is kept.
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LIBS = os.path.join(ROOT, "bench", "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "requantized.json")
# llama.h's `enum llama_ftype` values for the mixes made here.
FTYPES = {"Q4_K_M": 15, "Q6_K": 18, "Q8_0": 7, "Q5_0": 8, "Q3_K_M": 12, "Q2_K": 10, "IQ4_NL": 25, "IQ4_XS": 30, "IQ3_M": 27}
# llama.h's default `max_buf_size` (LLAMA_QUANT_MAX_BUF_SIZE, 8 GiB): checked to know the struct
# below has the library's layout.
DEFAULT_MAX_BUF_SIZE = 8 << 30


class QuantizeParams(ctypes.Structure):
    """llama.h's `llama_model_quantize_params` (llama.cpp of node-llama-cpp 3.22.1)."""

    _fields_ = [
        ("nthread", ctypes.c_int32),
        ("ftype", ctypes.c_int),
        ("output_tensor_type", ctypes.c_int),
        ("token_embedding_type", ctypes.c_int),
        ("allow_requantize", ctypes.c_bool),
        ("quantize_output_tensor", ctypes.c_bool),
        ("only_copy", ctypes.c_bool),
        ("pure", ctypes.c_bool),
        ("keep_split", ctypes.c_bool),
        ("dry_run", ctypes.c_bool),
        ("imatrix", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
        ("tt_overrides", ctypes.c_void_p),
        ("prune_layers", ctypes.c_void_p),
        ("max_buf_size", ctypes.c_size_t),
    ]


# ggml_log_callback: (level, text, user data). Only errors and the summary of warnings are printed
# (how many tensors fell back from a K-quant to another type), not llama.cpp's progress lines.
LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
GGML_LOG_LEVEL_WARN = 3
GGML_LOG_LEVEL_ERROR = 4


@LOG_CALLBACK
def QUIET(level, text, _user):
    if level == GGML_LOG_LEVEL_ERROR or (level == GGML_LOG_LEVEL_WARN and b"WARNING" in text):
        sys.stderr.write(text.decode(errors="replace"))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_llama():
    path = os.path.join(LIBS, "libllama.v0.5.0.so")
    if not os.path.exists(path):
        sys.exit(f"requantize: {path} is missing: run bash bench/setup-peers.sh first")
    # libllama finds libggml* beside itself only if they are loaded first or on the search path.
    for name in ("libggml-base.so", "libggml.v0.5.0.so"):
        ctypes.CDLL(os.path.join(LIBS, name), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    lib.llama_log_set.argtypes = [LOG_CALLBACK, ctypes.c_void_p]
    lib.llama_log_set(QUIET, None)
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    return lib


def expected_hashes():
    try:
        with open(FIXTURE) as f:
            return {m["type"]: m["sha256"] for m in json.load(f)["models"]}
    except FileNotFoundError:
        return {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "models", "requantized"))
    parser.add_argument("types", nargs="*", metavar="TYPE", help=f"of {', '.join(FTYPES)} (default: all)")
    args = parser.parse_args()
    for kind in args.types:
        if kind not in FTYPES:
            parser.error(f"{kind} is not one of {', '.join(FTYPES)}")
    if not os.path.exists(SOURCE):
        sys.exit(f"requantize: {SOURCE} is missing: run scripts/fetch-model.sh first")
    os.makedirs(args.out, exist_ok=True)
    hashes = expected_hashes()
    lib = None
    for kind in args.types or list(FTYPES):
        dest = os.path.join(args.out, f"SmolLM2-135M-Instruct.{kind}.gguf")
        want = hashes.get(kind)
        if os.path.exists(dest) and (want is None or sha256(dest) == want):
            print(f"requantize: {dest} is in place")
            continue
        if lib is None:
            lib = load_llama()
        params = lib.llama_model_quantize_default_params()
        if params.max_buf_size != DEFAULT_MAX_BUF_SIZE or params.ftype != FTYPES["Q8_0"]:
            sys.exit("requantize: libllama's llama_model_quantize_params is not the layout this script knows")
        params.ftype = FTYPES[kind]
        params.allow_requantize = True
        params.nthread = os.cpu_count() or 1
        tmp = dest + ".part"
        if lib.llama_model_quantize(SOURCE.encode(), tmp.encode(), ctypes.byref(params)) != 0:
            sys.exit(f"requantize: llama.cpp could not quantize to {kind}")
        got = sha256(tmp)
        if want is not None and got != want:
            os.remove(tmp)
            sys.exit(f"requantize: {kind} came out with sha256 {got}, not the fixture's {want}")
        os.replace(tmp, dest)
        print(f"requantize: wrote {dest} ({os.path.getsize(dest) / 1e6:.1f} MB, sha256 {got})")


if __name__ == "__main__":
    main()
