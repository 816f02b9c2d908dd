"""Write a tiny random-weight Gemma-4-shaped multimodal checkpoint (text + vision + audio).

The checkpoint exists only to exercise the plumbing of LiteRT-LM: its answers are gibberish,
but it decodes real WAV audio and JPEG/PNG images through the same encoders and data processor
as Gemma 4 E2B, in milliseconds. Everything is seeded, so the export is reproducible.

Shapes that litert-torch 0.10.0 hard-codes when it traces Gemma 4 (found the hard way):
- the audio subsampling conv starts with 128 channels (the mel bins of the feature extractor);
- the audio adapter is traced with 1536 input features, so `output_proj_dims` must be 1536;
- the vision adapter is traced with hidden size 3*16*16 = 768 (the flattened patch size).
"""

from __future__ import annotations

import json
from pathlib import Path

SEED = 1234
ATTENTION_DAMPING = 0.1

# Gemma 4's special tokens. The named ones become tokenizer attributes (tokenizer.boi_token, ...)
# that litert-torch reads to fill the model's metadata; the chat template relies on the turn ones.
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
NAMED_TOKENS = {
    "sot_token": "<|turn>",
    "eot_token": "<turn|>",
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "image_token": "<|image|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
    "audio_token": "<|audio|>",
    "video_token": "<|video|>",
    "soc_token": "<|channel>",
    "eoc_token": "<channel|>",
    "stc_token": "<|tool_call>",
    "etc_token": "<tool_call|>",
    "str_token": "<|tool_response>",
    "etr_token": "<tool_response|>",
    "escape_token": '<|"|>',
}

# One `<|image|>` / `<|audio|>` per media item: LiteRT-LM's Gemma 4 data processor swaps each for the
# encoder's soft tokens. Newlines are written as '\n' string literals: a literal newline next to a
# `-%}` would be stripped by the whitespace control. Unlike Gemma 4's own template, nothing follows
# `<turn|>`: LiteRT-LM prefills only the difference between renders, so a newline after the stop
# token would be in a rebuilt conversation's KV cache but never in a reused one.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<|turn>' + role + '\\n' }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] }}"
    "{%- elif item['type'] == 'image' -%}{{ '<|image|>' }}"
    "{%- elif item['type'] == 'audio' -%}{{ '<|audio|>' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<turn|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|turn>model\\n' }}{%- endif -%}"
)

# Printable ASCII, one token per character and no merges: any text the model writes tokenizes back
# to exactly the tokens it generated, so a conversation rebuilt from its own history holds the same
# tokens as the one that produced it (the engine's reuse-versus-rebuild test depends on that).
CHARACTERS = [chr(c) for c in range(0x20, 0x7F)] + ["\n"]
# Tokens the model may emit besides characters: the ends of a turn.
STOP_TOKENS = ("<eos>", "<turn|>")


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models

    specials = SPECIAL_TOKENS + list(NAMED_TOKENS.values())
    vocab = {token: i for i, token in enumerate(specials + CHARACTERS)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(specials)
    return tokenizer


def write_checkpoint(out_dir: Path) -> Path:
    """Write config, random weights, tokenizer and processor configs into `out_dir`."""
    import torch
    from transformers import (
        Gemma4AudioFeatureExtractor,
        Gemma4Config,
        Gemma4ForConditionalGeneration,
        GenerationConfig,
        PreTrainedTokenizerFast,
    )
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    out_dir.mkdir(parents=True, exist_ok=True)
    raw = _build_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens=dict(NAMED_TOKENS),
        add_bos_token=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out_dir)
    ids = {name: raw.token_to_id(tok) for name, tok in NAMED_TOKENS.items()}
    eos_ids = [raw.token_to_id("<eos>"), ids["eot_token"]]

    text_config = dict(
        vocab_size=raw.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        global_head_dim=32,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=512,
        vocab_size_per_layer_input=raw.get_vocab_size(),
        hidden_size_per_layer_input=8,
        max_position_embeddings=4096,
        pad_token_id=raw.token_to_id("<pad>"),
        bos_token_id=raw.token_to_id("<bos>"),
        eos_token_id=eos_ids,
    )
    vision_config = dict(
        hidden_size=768,  # traced by litert-torch as 3 * patch_size**2
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        position_embedding_size=512,
    )
    audio_config = dict(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=1,  # the patched audio attention broadcasts its mask over one head only
        subsampling_conv_channels=[128, 8],  # must start with the 128 mel bins
        output_proj_dims=1536,  # the audio adapter is traced with 1536 features
    )
    config = Gemma4Config(
        text_config=text_config,
        vision_config=vision_config,
        audio_config=audio_config,
        boi_token_id=ids["boi_token"],
        eoi_token_id=ids["eoi_token"],
        image_token_id=ids["image_token"],
        video_token_id=ids["video_token"],
        boa_token_id=ids["boa_token"],
        eoa_token_index=ids["eoa_token"],
        audio_token_id=ids["audio_token"],
    )
    torch.manual_seed(SEED)
    model = Gemma4ForConditionalGeneration(config).eval()
    # Zero the (tied) embedding rows of special tokens other than the stops: their logits are then
    # exactly 0 while some character always scores higher, so greedy output is plain text.
    embeddings = model.get_input_embeddings().weight
    with torch.no_grad():
        for token in SPECIAL_TOKENS + list(NAMED_TOKENS.values()):
            if token not in STOP_TOKENS:
                embeddings[raw.token_to_id(token)] = 0.0
        # Damp what attention adds to the residual stream: the context (prompt, audio, image) still
        # steers the output, but greedy choices no longer hinge on the last bits of the KV cache,
        # which differ between a prompt prefilled in one batch and the same tokens decoded one by one.
        for layer in model.model.language_model.layers:
            layer.post_attention_layernorm.weight.mul_(ATTENTION_DAMPING)
    model.generation_config = GenerationConfig(
        bos_token_id=text_config["bos_token_id"],
        eos_token_id=eos_ids,
        pad_token_id=text_config["pad_token_id"],
    )
    model.save_pretrained(out_dir)

    # AutoImageProcessor and AutoFeatureExtractor both read this one nested file.
    processor_config = {
        "processor_class": "Gemma4Processor",
        "image_processor": Gemma4ImageProcessorPil(max_soft_tokens=140).to_dict(),
        "feature_extractor": Gemma4AudioFeatureExtractor().to_dict(),
    }
    (out_dir / "processor_config.json").write_text(json.dumps(processor_config, indent=2, default=float))
    return out_dir
