#!/usr/bin/env python3
"""Reads the codebooks of ggml's IQ3 formats off llama.cpp's own dequantizer.

    bash bench/setup-peers.sh && python3 scripts/iq3_grids.py

IQ3_XXS and IQ3_S store each group of four weights as an index into a codebook of four-byte
points (256 for IQ3_XXS, 512 for IQ3_S), a sign bit per weight and a scale per 32 weights. The
codebooks are part of the formats: this script asks the prebuilt libggml that
bench/setup-peers.sh installs (node-llama-cpp's, the same library scripts/requantize.py
quantizes with) to dequantize blocks that name every index once with a scale of 1 and no signs,
and writes the points it returns into src/gguf/iq3_grids.rs. It then dequantizes random blocks
of both formats with the same library and writes them, with its outputs, into
tests/fixtures/iq3_blocks.json, which src/gguf/iq3.rs's tests hold the engine's conversion to:
the layout, the signs and the scales, not only the codebooks. Run once; both files are kept.
"""
import ctypes
import json
import os
import random
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBS = os.path.join(ROOT, "bench", "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
GRIDS = os.path.join(ROOT, "src", "gguf", "iq3_grids.rs")
BLOCKS = os.path.join(ROOT, "tests", "fixtures", "iq3_blocks.json")
SUPER = 256
# Bytes per 256-weight super-block: f16 d, then IQ3_XXS's 64 index bytes and 8 words of
# scale and signs; IQ3_S's 64 low index bytes, 8 bytes of high index bits, 32 of signs, 4 of
# scales.
XXS_BYTES = 2 + 64 + 32
S_BYTES = 2 + 64 + 8 + 32 + 4


def dequantizer(lib, name):
    f = getattr(lib, f"dequantize_row_{name}")
    f.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
    f.restype = None
    return f


def dequantize(f, blocks):
    n = len(blocks) // (XXS_BYTES if f.__name__.endswith("xxs") else S_BYTES) * SUPER
    out = (ctypes.c_float * n)()
    f(bytes(blocks), out, n)
    return list(out)


def points(values):
    """Four values a point, each a whole number 0..255 (the scale was 1, no sign set)."""
    pts = []
    for i in range(0, len(values), 4):
        p = values[i : i + 4]
        if any(v != int(v) or not 0 < v < 256 for v in p):
            raise SystemExit(f"iq3_grids: point {i // 4} reads {p}: not the layout this script knows")
        pts.append([int(v) for v in p])
    return pts


def xxs_grid(f):
    # d = 4 and a 4-bit scale of 0: the factor d (0.5 + 0) / 2 = 1. Sign indices 0: no sign.
    blocks = bytearray()
    for sb in range(4):
        blocks += struct.pack("<e", 4.0) + bytes(range(64 * sb, 64 * sb + 64)) + bytes(32)
    return points(dequantize(f, blocks))


def s_grid(f):
    # d = 1 and 4-bit scales of 0: the factor d (1 + 0) = 1. Index k of a 32-weight block is
    # its low byte and bit k of the block's high byte.
    blocks = bytearray()
    for sb in range(8):
        idx = list(range(64 * sb, 64 * sb + 64))
        qs = bytes(i & 255 for i in idx)
        qh = bytes(sum(((idx[8 * b + k] >> 8) & 1) << k for k in range(8)) for b in range(8))
        blocks += struct.pack("<e", 1.0) + qs + qh + bytes(32) + bytes(4)
    return points(dequantize(f, blocks))


def rust_table(name, doc, pts):
    # Eight points a line, as written here: rustfmt would put each on a line of its own.
    lines = [f"/// {doc}", "#[rustfmt::skip]", f"pub const {name}: [[u8; 4]; {len(pts)}] = ["]
    for i in range(0, len(pts), 8):
        lines.append("    " + " ".join(f"[{', '.join(map(str, p))}]," for p in pts[i : i + 8]))
    lines.append("];")
    return "\n".join(lines)


def main():
    path = os.path.join(LIBS, "libggml-base.so")
    if not os.path.exists(path):
        raise SystemExit(f"iq3_grids: {path} is missing: run bash bench/setup-peers.sh first")
    lib = ctypes.CDLL(path)
    xxs, s = dequantizer(lib, "iq3_xxs"), dequantizer(lib, "iq3_s")
    xxs.__name__, s.__name__ = "iq3_xxs", "iq3_s"
    gx, gs = xxs_grid(xxs), s_grid(s)
    with open(GRIDS, "w") as out:
        out.write(
            "//! The codebooks of ggml's IQ3 formats: each point is four weights' magnitudes,\n"
            "//! before their block's scale and signs. Read off llama.cpp's own dequantizer by\n"
            "//! scripts/iq3_grids.py (blocks naming each index once, a scale of 1, no signs);\n"
            "//! written by that script, not by hand.\n\n"
            + rust_table("IQ3_XXS_GRID", "IQ3_XXS's 256 points (even magnitudes, 4 to 62).", gx)
            + "\n\n"
            + rust_table("IQ3_S_GRID", "IQ3_S's 512 points (odd magnitudes, 1 to 15).", gs)
            + "\n"
        )
    rng = random.Random(3)
    cases = []
    for name, f, size, d in [("IQ3_XXS", xxs, XXS_BYTES, 0.0123), ("IQ3_S", s, S_BYTES, 0.0071)]:
        blocks = bytearray()
        # Three super-blocks: a normal d, a tiny one and a subnormal one; random everything else.
        for scale in [d, 3.1e-5, 2.4e-7]:
            blocks += struct.pack("<e", scale) + bytes(rng.randrange(256) for _ in range(size - 2))
        cases.append({"type": name, "blocks": blocks.hex(), "weights": dequantize(f, blocks)})
    with open(BLOCKS, "w") as out:
        json.dump({"made_by": "llama.cpp's dequantize_row_iq3_xxs and dequantize_row_iq3_s (node-llama-cpp's libggml-base), scripts/iq3_grids.py", "cases": cases}, out)
        out.write("\n")
    print(f"iq3_grids: wrote {GRIDS} ({len(gx)} + {len(gs)} points) and {BLOCKS}")


if __name__ == "__main__":
    main()
