#!/usr/bin/env python3
"""Reads the codebooks of ggml's IQ3 and IQ2 formats off llama.cpp's own dequantizer, and its
dequantization of random blocks of every type the engine reads through a stand-in but IQ4.

    bash bench/setup-peers.sh && python3 scripts/iq_grids.py

IQ3_XXS and IQ3_S store each group of four weights as an index into a codebook of four-byte
points (256 for IQ3_XXS, 512 for IQ3_S), a sign bit per weight and a scale per 32 weights. The
codebooks are part of the formats: this script asks the prebuilt libggml that
bench/setup-peers.sh installs (node-llama-cpp's, the same library scripts/requantize.py
quantizes with) to dequantize blocks that name every index once with a scale of 1 and no signs,
and writes the points it returns into src/gguf/iq3_grids.rs. It then dequantizes random blocks
of both formats with the same library and writes them, with its outputs, into
tests/fixtures/iq3_blocks.json, which src/gguf/iq3.rs's tests hold the engine's conversion to:
the layout, the signs and the scales, not only the codebooks.

IQ2_XXS and IQ1_S are read the same way into src/gguf/iq2_grids.rs and
tests/fixtures/iq2_blocks.json (src/gguf/iq2_xxs.rs's and src/gguf/iq1_s.rs's tests): IQ2_XXS's
256 points of eight magnitudes (8, 25 or 43), four indices and a 32-bit word of signs and scale
per 32 weights; IQ1_S's 2048 points of eight values (-1, 0 or 1), four 11-bit indices, a 3-bit
scale and the sign of a shift of 1/8 per 32 weights.

IQ2_XS's 512 and IQ2_S's 1024 points (magnitudes 8, 25 or 43) go into src/gguf/iq2_s_grids.rs,
and random blocks of IQ2_XS, IQ2_S, IQ1_M (IQ1_S's codebook with a scale per 16 weights),
TQ1_0, TQ2_0, Q1_0 and Q2_0 with their dequantization into tests/fixtures/low_bit_blocks.json
(the tests of src/gguf/iq2_xs.rs, iq1_m.rs, ternary.rs and q1_0.rs), each type's scale `d`
where its layout keeps it, four blocks each (a normal d, 2e-4, a tiny and a subnormal one).
Run once; all six files are kept, and a run writes the same bytes again.
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
GRIDS2 = os.path.join(ROOT, "src", "gguf", "iq2_grids.rs")
BLOCKS2 = os.path.join(ROOT, "tests", "fixtures", "iq2_blocks.json")
GRIDS3 = os.path.join(ROOT, "src", "gguf", "iq2_s_grids.rs")
BLOCKS3 = os.path.join(ROOT, "tests", "fixtures", "low_bit_blocks.json")
SUPER = 256
# Bytes per 256-weight super-block: f16 d, then IQ3_XXS's 64 index bytes and 8 words of
# scale and signs; IQ3_S's 64 low index bytes, 8 bytes of high index bits, 32 of signs, 4 of
# scales.
XXS_BYTES = 2 + 64 + 32
S_BYTES = 2 + 64 + 8 + 32 + 4
# IQ2_XXS: f16 d, then 8 bytes a 32-weight block (four index bytes, a word of signs and scale).
# IQ1_S: f16 d, 32 bytes of indices' low 8 bits, then a 16-bit word a block (the four indices'
# high 3 bits, the 3-bit scale, the shift's sign).
IQ2_XXS_BYTES = 2 + 64
IQ1_S_BYTES = 2 + 32 + 16
# IQ2_XS: f16 d, a 16-bit word per eight weights (a 9-bit index, a 7-bit sign code), then a
# byte of two 4-bit scales per 32 weights. IQ2_S: f16 d, 32 bytes of indices' low 8 bits, 32
# bytes of sign bits, a byte of their high 2 bits per 32 weights, a byte of two scales per 32.
# IQ1_M: 32 bytes of indices' low 8 bits, 16 of their high 3 bits and shifts' signs, 8 of
# 3-bit scales with the f16 d in the top 4 bits of each 16-bit word. TQ1_0: 48 bytes of five
# base-3 digits each, 4 bytes of four, f16 d. TQ2_0: 64 bytes of four 2-bit codes each, f16 d.
IQ2_XS_BYTES = 2 + 64 + 8
IQ2_S_BYTES = 2 + 32 + 32 + 8 + 8
IQ1_M_BYTES = 32 + 16 + 8
TQ1_0_BYTES = 48 + 4 + 2
TQ2_0_BYTES = 64 + 2
# Q1_0: f16 d, then a sign bit per weight (128 weights a block). Q2_0: f16 d, then four 2-bit
# codes a byte (64 weights a block).
Q1_0_BYTES = 2 + 16
Q2_0_BYTES = 2 + 16
BYTES = {
    "iq3_xxs": XXS_BYTES,
    "iq3_s": S_BYTES,
    "iq2_xxs": IQ2_XXS_BYTES,
    "iq1_s": IQ1_S_BYTES,
    "iq2_xs": IQ2_XS_BYTES,
    "iq2_s": IQ2_S_BYTES,
    "iq1_m": IQ1_M_BYTES,
    "tq1_0": TQ1_0_BYTES,
    "tq2_0": TQ2_0_BYTES,
    "q1_0": Q1_0_BYTES,
    "q2_0": Q2_0_BYTES,
}
# Weights a block, where not a 256-weight super-block.
WEIGHTS = {"q1_0": 128, "q2_0": 64}


def dequantizer(lib, name):
    f = getattr(lib, f"dequantize_row_{name}")
    f.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
    f.restype = None
    return f


def dequantize(f, blocks):
    n = len(blocks) // BYTES[f.__name__] * WEIGHTS.get(f.__name__, SUPER)
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


def iq2_xxs_grid(f):
    # d = 8 and a 4-bit scale of 0: the factor d (0.5 + 0) / 4 = 1. Sign codes 0: no sign.
    # Each 32-weight block names four points; a super-block 32.
    blocks = bytearray()
    for sb in range(8):
        blocks += struct.pack("<e", 8.0)
        for b in range(8):
            blocks += bytes(range(32 * sb + 4 * b, 32 * sb + 4 * b + 4)) + bytes(4)
    pts = []
    values = dequantize(f, blocks)
    for i in range(0, len(values), 8):
        p = values[i : i + 8]
        if any(v not in (8.0, 25.0, 43.0) for v in p):
            raise SystemExit(f"iq_grids: IQ2_XXS point {i // 8} reads {p}: not the layout this script knows")
        pts.append([int(v) for v in p])
    return pts


def iq1_s_grid(f):
    # d = 1, scale bits 0 and the shift's sign bit 0: weight = 1 * (point + 1/8). Index k of a
    # block is its low byte and 3 bits of the block's word.
    blocks = bytearray()
    for sb in range(64):
        idx = list(range(32 * sb, 32 * sb + 32))
        qs = bytes(i & 255 for i in idx)
        qh = b"".join(struct.pack("<H", sum((idx[4 * b + k] >> 8) << (3 * k) for k in range(4))) for b in range(8))
        blocks += struct.pack("<e", 1.0) + qs + qh
    pts = []
    values = dequantize(f, blocks)
    for i in range(0, len(values), 8):
        p = [v - 0.125 for v in values[i : i + 8]]
        if any(v not in (-1.0, 0.0, 1.0) for v in p):
            raise SystemExit(f"iq_grids: IQ1_S point {i // 8} reads {p}: not the layout this script knows")
        pts.append([int(v) for v in p])
    return pts


def magnitudes(values, name):
    """Eight values a point, each 8, 25 or 43 (the factor was 1, no sign set)."""
    pts = []
    for i in range(0, len(values), 8):
        p = values[i : i + 8]
        if any(v not in (8.0, 25.0, 43.0) for v in p):
            raise SystemExit(f"iq_grids: {name} point {i // 8} reads {p}: not the layout this script knows")
        pts.append([int(v) for v in p])
    return pts


def iq2_xs_grid(f):
    # d = 8 and 4-bit scales of 0: the factor d (0.5 + 0) / 4 = 1. Each word is an index with
    # sign code 0: no sign. 32 indices a super-block.
    blocks = bytearray()
    for sb in range(16):
        words = b"".join(struct.pack("<H", i) for i in range(32 * sb, 32 * sb + 32))
        blocks += struct.pack("<e", 8.0) + words + bytes(8)
    return magnitudes(dequantize(f, blocks), "IQ2_XS")


def iq2_s_grid(f):
    # d = 8, scales 0, no sign bits. Index l of a 32-weight block is its low byte and bits
    # 2l, 2l + 1 of the block's high byte.
    blocks = bytearray()
    for sb in range(32):
        idx = list(range(32 * sb, 32 * sb + 32))
        qs = bytes(i & 255 for i in idx)
        qh = bytes(sum((idx[4 * b + l] >> 8) << (2 * l) for l in range(4)) for b in range(8))
        blocks += struct.pack("<e", 8.0) + qs + bytes(32) + qh + bytes(8)
    return magnitudes(dequantize(f, blocks), "IQ2_S")


def rust_table(name, doc, pts, per_line=8, item="u8"):
    # Several points a line, as written here: rustfmt would put each on a line of its own.
    lines = [f"/// {doc}", "#[rustfmt::skip]", f"pub const {name}: [[{item}; {len(pts[0])}]; {len(pts)}] = ["]
    for i in range(0, len(pts), per_line):
        lines.append("    " + " ".join(f"[{', '.join(map(str, p))}]," for p in pts[i : i + per_line]))
    lines.append("];")
    return "\n".join(lines)


def d_first(d, rest):
    """A super-block whose f16 scale comes first (the IQ2, IQ3 and IQ1_S layouts)."""
    return d + rest


def d_last(d, rest):
    """A super-block whose f16 scale comes last (TQ1_0's and TQ2_0's layout)."""
    return rest + d


def d_in_scales(d, rest):
    """An IQ1_M super-block: 32 bytes of indices' low bits, 16 of their high bits and shifts,
    then four 16-bit words of 3-bit scales whose top 4 bits are, in turn, the f16 scale's."""
    block = bytearray(rest + d)
    bits = struct.unpack("<H", d)[0]
    for k in range(4):
        word = struct.unpack_from("<H", block, 48 + 2 * k)[0]
        struct.pack_into("<H", block, 48 + 2 * k, (word & 0x0FFF) | (((bits >> (4 * k)) & 15) << 12))
    return bytes(block)


def write_files(grids_path, header, tables, blocks_path, seed, types, scales=(3.1e-5, 2.4e-7)):
    """Writes a codebook module (its `header` lines, then `tables`; none without them) and the
    random super-blocks of `types` ((name, dequantizer, bytes, normal d, layout) each) with
    their dequantization: one with the normal d, then one for each of `scales`."""
    if tables:
        with open(grids_path, "w") as out:
            out.write("".join(f"//! {line}\n" for line in header) + "\n" + "\n\n".join(tables) + "\n")
    rng = random.Random(seed)
    cases = []
    for name, f, size, d, layout in types:
        blocks = bytearray()
        # A normal d, then tiny and subnormal ones; random everything else.
        for scale in [d, *scales]:
            blocks += layout(struct.pack("<e", scale), bytes(rng.randrange(256) for _ in range(size - 2)))
        cases.append({"type": name, "blocks": blocks.hex(), "weights": dequantize(f, blocks)})
    made_by = " and ".join(f"dequantize_row_{f.__name__}" for _, f, _, _, _ in types)
    with open(blocks_path, "w") as out:
        json.dump({"made_by": f"llama.cpp's {made_by} (node-llama-cpp's libggml-base), scripts/iq_grids.py", "cases": cases}, out)
        out.write("\n")
    print(f"iq_grids: wrote {grids_path if tables else 'no codebook'} and {blocks_path}")


def main():
    path = os.path.join(LIBS, "libggml-base.so")
    if not os.path.exists(path):
        raise SystemExit(f"iq_grids: {path} is missing: run bash bench/setup-peers.sh first")
    lib = ctypes.CDLL(path)
    f = {}
    for name in BYTES:
        f[name] = dequantizer(lib, name)
        f[name].__name__ = name
    read_off = "Read off llama.cpp's own dequantizer by"
    write_files(
        GRIDS,
        [
            "The codebooks of ggml's IQ3 formats: each point is four weights' magnitudes,",
            f"before their block's scale and signs. {read_off}",
            "scripts/iq_grids.py (blocks naming each index once, a scale of 1, no signs);",
            "written by that script, not by hand.",
        ],
        [
            rust_table("IQ3_XXS_GRID", "IQ3_XXS's 256 points (even magnitudes, 4 to 62).", xxs_grid(f["iq3_xxs"])),
            rust_table("IQ3_S_GRID", "IQ3_S's 512 points (odd magnitudes, 1 to 15).", s_grid(f["iq3_s"])),
        ],
        BLOCKS,
        3,
        [("IQ3_XXS", f["iq3_xxs"], XXS_BYTES, 0.0123, d_first), ("IQ3_S", f["iq3_s"], S_BYTES, 0.0071, d_first)],
    )
    write_files(
        GRIDS2,
        [
            "The codebooks of ggml's IQ2_XXS and IQ1_S formats: each point is eight weights'",
            "magnitudes (IQ2_XXS) or signed steps (IQ1_S), before their block's scale, signs and",
            f"shift. {read_off} scripts/iq_grids.py (blocks naming",
            "each index once, a scale of 1, no signs); written by that script, not by hand.",
        ],
        [
            rust_table("IQ2_XXS_GRID", "IQ2_XXS's 256 points (magnitudes 8, 25 and 43).", iq2_xxs_grid(f["iq2_xxs"]), 4),
            rust_table("IQ1_S_GRID", "IQ1_S's 2048 points (steps -1, 0 and 1).", iq1_s_grid(f["iq1_s"]), 4, "i8"),
        ],
        BLOCKS2,
        5,
        [("IQ2_XXS", f["iq2_xxs"], IQ2_XXS_BYTES, 0.0173, d_first), ("IQ1_S", f["iq1_s"], IQ1_S_BYTES, 0.0419, d_first)],
    )
    # A fourth super-block where IQ1_M's d is normal but d / 8 is not (2^-14 <= d < 2^-11).
    write_files(
        GRIDS3,
        [
            "The codebooks of ggml's IQ2_XS and IQ2_S formats: each point is eight weights'",
            "magnitudes, before their half-block's scale and signs. Read off llama.cpp's own",
            "dequantizer by scripts/iq_grids.py (blocks naming each index once, a scale of 1,",
            "no signs); written by that script, not by hand.",
        ],
        [
            rust_table("IQ2_XS_GRID", "IQ2_XS's 512 points (magnitudes 8, 25 and 43).", iq2_xs_grid(f["iq2_xs"]), 4),
            rust_table("IQ2_S_GRID", "IQ2_S's 1024 points (magnitudes 8, 25 and 43).", iq2_s_grid(f["iq2_s"]), 4),
        ],
        BLOCKS3,
        7,
        [
            ("IQ2_XS", f["iq2_xs"], IQ2_XS_BYTES, 0.0151, d_first),
            ("IQ2_S", f["iq2_s"], IQ2_S_BYTES, 0.0137, d_first),
            ("IQ1_M", f["iq1_m"], IQ1_M_BYTES, 0.0093, d_in_scales),
            ("TQ1_0", f["tq1_0"], TQ1_0_BYTES, 0.0219, d_last),
            ("TQ2_0", f["tq2_0"], TQ2_0_BYTES, 0.0219, d_last),
            ("Q1_0", f["q1_0"], Q1_0_BYTES, 0.0147, d_first),
            ("Q2_0", f["q2_0"], Q2_0_BYTES, 0.0182, d_first),
        ],
        scales=(2.0e-4, 3.1e-5, 2.4e-7),
    )


if __name__ == "__main__":
    main()
