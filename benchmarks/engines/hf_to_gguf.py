"""Convert a Hugging Face Llama directory to GGUF with llama.cpp's own converter.

    python benchmarks/engines/hf_to_gguf.py MODEL_DIR OUT.gguf [--convert-dir DIR] [--outtype f16]

llama.cpp's convert_hf_to_gguf.py identifies a BPE tokenizer's pre-tokenizer by hashing how it
splits a test string, and refuses tokenizers it has no hash for, such as the byte-level BPE the
tests train locally. Such a tokenizer splits like GPT-2's, so this wrapper answers "gpt-2" for an
unknown hash (benchmarks/README.md) and otherwise runs the converter unchanged. ``--convert-dir``
is the folder holding convert_hf_to_gguf.py (with conversion/ and gguf-py beside it); by default
the engine cache's (benchmarks/engines/install-llama-server.sh). Needs torch, numpy and
transformers in the running Python.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path


def _default_convert_dir() -> Path | None:
    # perfmodel.cache.engines_dir, spelled out: this script runs in the engines' own interpreters.
    root = Path(os.environ.get("LLM_PERF_LAB_CACHE") or Path.home() / ".cache" / "llm-perf-lab")
    found = sorted((root / "engines").glob("llama-server-*/convert/convert_hf_to_gguf.py"))
    return found[-1].parent if found else None


def _patch_pre_tokenizer() -> None:
    """Answer "gpt-2" where the converter does not know the tokenizer's hash."""
    import conversion.base as base  # the converter's package, on sys.path by now

    for cls in vars(base).values():
        method = getattr(cls, "get_vocab_base_pre", None) if isinstance(cls, type) else None
        if method is None or getattr(method, "_llm_perf_patched", False):
            continue

        def lenient(self, tokenizer, _original=method):
            try:
                return _original(self, tokenizer)
            except NotImplementedError:
                return "gpt-2"

        lenient._llm_perf_patched = True  # type: ignore[attr-defined]
        cls.get_vocab_base_pre = lenient


def _patch_sentencepiece_probe() -> None:
    """Skip the SentencePiece vocab path when there is no tokenizer.model.

    The converter imports sentencepiece before it looks for tokenizer.model, so without that
    package it fails even for a tokenizer.json-only directory, which never needs it.
    """
    import conversion.base as base

    for cls in vars(base).values():
        method = (
            getattr(cls, "_create_vocab_sentencepiece", None) if isinstance(cls, type) else None
        )
        if method is None or getattr(method, "_llm_perf_patched", False):
            continue

        def probe(self, _original=method):
            path = self.dir_model / "tokenizer.model"
            if not path.is_file():
                raise FileNotFoundError(f"File not found: {path}")
            return _original(self)

        probe._llm_perf_patched = True  # type: ignore[attr-defined]
        cls._create_vocab_sentencepiece = probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("outfile", type=Path)
    parser.add_argument("--convert-dir", type=Path, default=None)
    parser.add_argument("--outtype", default="f16", help="f32, f16, bf16 or q8_0")
    args = parser.parse_args(argv)
    convert_dir = args.convert_dir or _default_convert_dir()
    if convert_dir is None or not (convert_dir / "convert_hf_to_gguf.py").is_file():
        print(
            "llama.cpp's converter was not found: run benchmarks/engines/install-llama-server.sh "
            "or pass --convert-dir",
            file=sys.stderr,
        )
        return 2
    sys.path[:0] = [str(convert_dir), str(convert_dir / "gguf-py")]
    if (convert_dir / "conversion").is_dir():
        _patch_pre_tokenizer()
        _patch_sentencepiece_probe()
    script = convert_dir / "convert_hf_to_gguf.py"
    sys.argv = [str(script), str(args.model_dir), "--outfile", str(args.outfile),
                "--outtype", args.outtype]  # fmt: skip
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
