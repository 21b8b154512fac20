"""A Hugging Face Hub cache laid out by the test, exactly as huggingface_hub writes one.

``<cache>/models--<org>--<name>/blobs/<sha256>`` holds each file's bytes once,
``snapshots/<commit>/<file>`` links to its blob, and ``refs/<revision>`` names the commit. With
``HF_HUB_CACHE`` pointing at ``<cache>`` and ``HF_HUB_OFFLINE=1``, huggingface_hub resolves the
repository from disk alone: nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["lay_out_hub_repo", "tokenizer_repo_files"]


def tokenizer_repo_files(folder: Path, vocab_size: int = 512) -> Path:
    """Write a model repository's tokenizer files into ``folder``: tokenizer.json and
    tokenizer_config.json (the synthetic tokenizer of ``vocab_size`` ids) and a small Llama
    config.json of that vocabulary; no weights. Returns ``folder``."""
    Tokenizer.for_preset(vocab_size).save(folder)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


def lay_out_hub_repo(
    cache: Path, repo_id: str, source: Path, commit: str, revision: str = "main",
    repo_type: str = "model",
) -> Path:  # fmt: skip
    """Put every file of ``source`` into ``cache`` as repository ``repo_id`` (of ``repo_type``:
    model or dataset) at ``commit`` (40 hex digits), with ``refs/<revision>`` naming it;
    returns the snapshot folder."""
    repo = cache / (f"{repo_type}s--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(source.iterdir()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / file.name
        if not link.exists():
            link.symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot
