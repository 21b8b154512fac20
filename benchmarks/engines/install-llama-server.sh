#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama-cpp-python sdist (its vendored llama.cpp), once,
# under the engine cache: a machine that keeps ~/.cache/llm-perf-lab/engines/ (or
# $LLM_PERF_LAB_CACHE/engines) never builds it again. About 7.5 minutes on 2 cores; one static binary.
# Also keeps the sdist's GGUF converter (convert_hf_to_gguf.py, its conversion/ package and
# gguf-py) beside it: tests convert a tiny Hugging Face Llama to GGUF with it
# (benchmarks/engines/hf_to_gguf.py). Prints the binary's path on its last line.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
ROOT="${LLM_PERF_LAB_CACHE:-$HOME/.cache/llm-perf-lab}/engines"
DEST="$ROOT/llama-server-$VERSION"
BIN="$DEST/bin/llama-server"

if [ -f "$DEST/.installed" ] && [ -x "$BIN" ]; then
    echo "llama-server ($VERSION): cached in $DEST" >&2
    echo "$BIN"
    exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK"
tar -xzf "$WORK"/llama_cpp_python-*.tar.gz -C "$WORK"
SRC="$(echo "$WORK"/llama_cpp_python-*/vendor/llama.cpp)"
# GGML_NATIVE: the cache belongs to this machine, so the binary may use all of its CPU features.
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >"$WORK/cmake.log"
nice cmake --build "$WORK/build" --target llama-server -j"${LLAMA_BUILD_JOBS:-2}" >"$WORK/build.log"
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/convert"
cp "$WORK/build/bin/llama-server" "$BIN"
cp "$SRC/convert_hf_to_gguf.py" "$DEST/convert/"
cp -r "$SRC/gguf-py" "$DEST/convert/gguf-py"
# Newer llama.cpp splits the converter into a package beside the script.
if [ -d "$SRC/conversion" ]; then cp -r "$SRC/conversion" "$DEST/convert/conversion"; fi
"$BIN" --version >&2 || true
touch "$DEST/.installed"
echo "$BIN"
