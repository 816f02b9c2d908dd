"""A Realtime session's settings: `session.update` checked and applied, and the session object the client is shown.

An update is checked whole before any of it applies. Fields Sotto honours change the session; fields that cannot
change anything here (tracing, the model name, ...) are ignored; fields asking for what Sotto cannot do (tools,
transcription, other audio formats) are refused with an `error` naming what is accepted (docs/openai.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from services.common import audio
from services.gateway.wires.openai_common import OpenAIError
from sotto.v1 import vad_pb2

MAX_HOLD_MS = 10000  # the vad service's upper bound for max_turn_silence_ms
INPUT_RATES = (24000, audio.SPEECH_RATE)  # 24 kHz is OpenAI's only rate; 16 kHz (the vad's) is Sotto's extension
OUTPUT_RATE = 24000
_IGNORED = {"model", "tracing", "truncation", "include", "reasoning", "parallel_tool_calls", "tool_choice", "id",
            "object", "expires_at", "prompt_cache_key"}
_KNOWN = _IGNORED | {"type", "instructions", "output_modalities", "max_output_tokens", "audio", "tools", "prompt"}


EAGERNESS = ("low", "medium", "high", "auto")
# What session objects say of the echo canceller (see `_echo_cancel`).
NOISE_REDUCTION = {True: {"type": "far_field"}, False: None}
# semantic_vad: how long a turn the end-of-turn model holds open may stay silent, as a multiple of the gateway's
# SOTTO_VAD_MAX_TURN_SILENCE_MS ("auto" and "medium" are the gateway's own, as on /ws).
EAGERNESS_HOLD = {"low": 2.0, "medium": 1.0, "auto": 1.0, "high": 0.5}


@dataclass(frozen=True)
class TurnDetection:
    """Realtime's `turn_detection`. `server_vad` is silence alone, as OpenAI defines it (`threshold`,
    `silence_duration_ms`); `semantic_vad` is the vad service's end-of-turn model, its `eagerness` scaling how long
    a held turn may stay silent. Fields a client leaves unset come from the gateway's settings."""

    type: str  # "server_vad" or "semantic_vad"
    threshold: float
    silence_duration_ms: int
    eagerness: str = "auto"
    create_response: bool = True

    def vad_settings(self, gateway: vad_pb2.VadSettings) -> vad_pb2.VadSettings:
        """The session's vad settings (the gateway's, as /ws uses them) with this detection applied."""
        out = vad_pb2.VadSettings()
        out.CopyFrom(gateway)
        if self.type == "server_vad":
            out.silence_only, out.threshold, out.min_silence_ms = True, self.threshold, self.silence_duration_ms
        else:
            out.silence_only = False
            hold = round(gateway.max_turn_silence_ms * EAGERNESS_HOLD[self.eagerness])
            out.max_turn_silence_ms = max(gateway.turn_silence_ms, min(MAX_HOLD_MS, hold))
        return out


@dataclass(frozen=True)
class RealtimeConfig:
    instructions: str
    voice: str
    turn_detection: TurnDetection | None
    gateway_detection: TurnDetection  # what the gateway's settings give: the default, and fields left unset
    input_rate: int = INPUT_RATES[0]
    max_output_tokens: int | None = None  # None: the llm service's default reply length
    # The server removes the answer's echo from the input (noise_reduction far_field); the gateway's choice
    # (SOTTO_GATEWAY_ECHO_CANCEL) until the client says otherwise, and again after it sends null.
    echo_cancel: bool = True
    gateway_echo_cancel: bool = True

    def session_object(self, *, session_id: str, model: str, prefix_padding_ms: int) -> dict[str, Any]:
        """The `session` of session.created / session.updated, in the GA shape the SDK parses."""
        pcm_in, pcm_out = {"type": "audio/pcm", "rate": self.input_rate}, {"type": "audio/pcm", "rate": OUTPUT_RATE}
        detection: dict[str, Any] | None = None
        td = self.turn_detection
        if td is not None and td.type == "server_vad":
            detection = {"type": "server_vad", "threshold": td.threshold, "silence_duration_ms": td.silence_duration_ms,
                         "prefix_padding_ms": prefix_padding_ms, "create_response": td.create_response,
                         "interrupt_response": True, "idle_timeout_ms": None}
        elif td is not None:
            detection = {"type": "semantic_vad", "eagerness": td.eagerness, "create_response": td.create_response,
                         "interrupt_response": True}
        return {"type": "realtime", "object": "realtime.session", "id": session_id, "model": model,
                "output_modalities": ["audio"], "instructions": self.instructions,
                "max_output_tokens": self.max_output_tokens or "inf", "tools": [], "tool_choice": "auto",
                "tracing": None, "truncation": "auto", "prompt": None, "include": None,
                "audio": {"input": {"format": pcm_in, "transcription": None,
                                    "noise_reduction": NOISE_REDUCTION[self.echo_cancel], "turn_detection": detection},
                          "output": {"format": pcm_out, "voice": self.voice, "speed": 1.0}}}


def _dict(value: Any, param: str) -> dict:
    if not isinstance(value, dict):
        raise OpenAIError(f"'{param}' must be an object", param=param)
    return value


def _optional_dict(value: Any, param: str) -> dict:
    """An object that may be left out or null; any other value (a list, a string, ...) is refused."""
    return {} if value is None else _dict(value, param)


def instructions(value: Any, param: str, max_chars: int) -> str:
    """A system prompt from the client: it rides along in every prompt it applies to, so its size is bounded."""
    if not isinstance(value, str):
        raise OpenAIError(f"'{param}' must be a string", param=param)
    if len(value) > max_chars:
        raise OpenAIError(f"'{param}' is over {max_chars} characters (SOTTO_GATEWAY_MAX_PROMPT_CHARS)", param=param,
                          code="context_length_exceeded")
    return value


def _refuse(param: str, accepted: str) -> OpenAIError:
    return OpenAIError(f"'{param}' is not supported by this server; accepted: {accepted}", param=param,
                       code="unsupported_parameter")


def apply_update(cfg: RealtimeConfig, session: Any, voices: list[str], *, max_chars: int) -> RealtimeConfig:
    """`cfg` with a session.update's `session` applied; raises OpenAIError (nothing applied) on any refusal."""
    session = _dict(session, "session")
    unknown = sorted(set(session) - _KNOWN)
    if unknown:
        raise OpenAIError(f"unknown session field(s): {', '.join(unknown)}", param=f"session.{unknown[0]}")
    if session.get("type", "realtime") != "realtime":
        raise _refuse("session.type", '"realtime" (transcription-only sessions are not offered)')
    if session.get("output_modalities") not in (None, ["audio"]):
        raise _refuse("session.output_modalities", '["audio"] (audio with its transcript)')
    if session.get("tools"):
        raise _refuse("session.tools", "[] (no function calling)")
    if session.get("prompt") is not None:
        raise _refuse("session.prompt", "null (use instructions)")
    changes: dict[str, Any] = {}
    if "instructions" in session:
        changes["instructions"] = instructions(session["instructions"], "session.instructions", max_chars)
    if "max_output_tokens" in session:
        changes["max_output_tokens"] = max_output_tokens(session["max_output_tokens"], "session.max_output_tokens")
    audio = _optional_dict(session.get("audio"), "session.audio")
    if set(audio) - {"input", "output"}:
        raise OpenAIError("'session.audio' has 'input' and 'output' only", param="session.audio")
    changes |= _input(_optional_dict(audio.get("input"), "session.audio.input"), cfg)
    changes |= _output(_optional_dict(audio.get("output"), "session.audio.output"), voices)
    return dataclasses.replace(cfg, **changes)


def max_output_tokens(value: Any, param: str) -> int | None:
    if value == "inf" or value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise OpenAIError(f"'{param}' must be an integer from 1 to 4096, or \"inf\"", param=param)
    return value


def _pcm_format(fmt: Any, param: str, rates: tuple[int, ...]) -> int:
    fmt = _dict(fmt, param)
    if fmt.get("type", "audio/pcm") != "audio/pcm" or fmt.get("rate", rates[0]) not in rates:
        accepted = " or ".join(f'{{"type": "audio/pcm", "rate": {r}}}' for r in rates)
        raise _refuse(param, f"{accepted} (PCM16 mono)")
    return fmt.get("rate", rates[0])


def _input(audio_in: dict, cfg: RealtimeConfig) -> dict[str, Any]:
    unknown = set(audio_in) - {"format", "transcription", "noise_reduction", "turn_detection"}
    if unknown:
        raise OpenAIError(f"unknown field(s) in session.audio.input: {', '.join(sorted(unknown))}",
                          param="session.audio.input")
    changes: dict[str, Any] = {}
    if audio_in.get("format") is not None:
        changes["input_rate"] = _pcm_format(audio_in["format"], "session.audio.input.format", INPUT_RATES)
    if audio_in.get("transcription") is not None:
        raise _refuse("session.audio.input.transcription", "null (the asr service transcribes every spoken turn)")
    if "turn_detection" in audio_in:
        changes["turn_detection"] = _turn_detection(audio_in["turn_detection"], cfg.gateway_detection)
    if "noise_reduction" in audio_in:
        changes["echo_cancel"] = _echo_cancel(audio_in["noise_reduction"], cfg.gateway_echo_cancel)
    return changes


def _echo_cancel(value: Any, gateway: bool) -> bool:
    """`noise_reduction` names the microphone: far_field (a loudspeaker in the room: its echo is removed),
    near_field (a headset: nothing to remove); null leaves it to the gateway (SOTTO_GATEWAY_ECHO_CANCEL)."""
    if value is None:
        return gateway
    param = "session.audio.input.noise_reduction"
    kind = _dict(value, param).get("type")
    if set(value) - {"type"} or kind not in ("near_field", "far_field"):
        raise _refuse(param, '{"type": "far_field"} (the answer\'s echo is removed), {"type": "near_field"} (it is '
                             "not) or null (the server's default)")
    return kind == "far_field"


def _turn_detection(value: Any, gateway: TurnDetection) -> TurnDetection | None:
    """A client's turn_detection; what it leaves unset comes from the gateway's settings (`gateway`)."""
    if value is None:
        return None
    param = "session.audio.input.turn_detection"
    value = _dict(value, param)
    kind = value.get("type")
    if kind not in ("server_vad", "semantic_vad"):
        raise _refuse(f"{param}.type", '"server_vad" (silence alone), "semantic_vad" (the end-of-turn model), or '
                                       "turn_detection null")
    if value.get("interrupt_response", True) is not True:
        raise _refuse(f"{param}.interrupt_response", "true (speech always interrupts the answer)")
    if value.get("idle_timeout_ms") is not None:
        raise _refuse(f"{param}.idle_timeout_ms", "null")
    create = value.get("create_response", gateway.create_response)
    if not isinstance(create, bool):
        raise OpenAIError(f"'{param}.create_response' must be a boolean", param=f"{param}.create_response")
    if kind == "semantic_vad":
        eagerness = value.get("eagerness", "auto")
        if eagerness not in EAGERNESS:
            raise OpenAIError(f"'{param}.eagerness' must be one of {', '.join(EAGERNESS)}",
                              param=f"{param}.eagerness")
        return dataclasses.replace(gateway, type=kind, eagerness=eagerness, create_response=create)
    threshold = value.get("threshold", gateway.threshold)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise OpenAIError(f"'{param}.threshold' must be a number between 0 and 1", param=f"{param}.threshold")
    silence = value.get("silence_duration_ms", gateway.silence_duration_ms)
    if isinstance(silence, bool) or not isinstance(silence, int) or not 32 <= silence <= 10000:
        raise OpenAIError(f"'{param}.silence_duration_ms' must be an integer from 32 to 10000",
                          param=f"{param}.silence_duration_ms")
    return dataclasses.replace(gateway, type=kind, threshold=float(threshold), silence_duration_ms=silence,
                               create_response=create)


def _output(audio_out: dict, voices: list[str]) -> dict[str, Any]:
    unknown = set(audio_out) - {"format", "voice", "speed"}
    if unknown:
        raise OpenAIError(f"unknown field(s) in session.audio.output: {', '.join(sorted(unknown))}",
                          param="session.audio.output")
    if audio_out.get("format") is not None:
        _pcm_format(audio_out["format"], "session.audio.output.format", (OUTPUT_RATE,))
    if audio_out.get("speed", 1.0) != 1.0:
        raise _refuse("session.audio.output.speed", "1.0")
    if "voice" not in audio_out:
        return {}
    return {"voice": voice(audio_out["voice"], voices, "session.audio.output.voice")}


def voice(value: Any, voices: list[str], param: str) -> str:
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or (voices and value not in voices):
        raise OpenAIError(f"'{param}' {value!r} is not a voice of this server; accepted: {', '.join(voices)}",
                          param=param, code="invalid_voice")
    return value


def response_overrides(params: dict, voices: list[str], *, max_chars: int) -> dict[str, Any]:
    """A response.create's own instructions, length and voice; what else it may say is checked and refused."""
    known = {"instructions", "max_output_tokens", "output_modalities", "audio", "conversation", "metadata", "tools",
             "tool_choice", "input", "prompt"}
    if unknown := sorted(set(params) - known):
        raise OpenAIError(f"unknown response field(s): {', '.join(unknown)}", param=f"response.{unknown[0]}")
    if params.get("conversation", "auto") != "auto" or params.get("input") is not None:
        raise OpenAIError("responses are always on the session's conversation: 'conversation' \"auto\", no 'input'",
                          param="response.conversation", code="unsupported_parameter")
    if params.get("output_modalities") not in (None, ["audio"]) or params.get("tools") or params.get("prompt"):
        raise OpenAIError("a response is audio with its transcript, without tools or prompt objects",
                          param="response", code="unsupported_parameter")
    overrides: dict[str, Any] = {}
    if params.get("instructions") is not None:
        overrides["instructions"] = instructions(params["instructions"], "response.instructions", max_chars)
    if "max_output_tokens" in params:
        overrides["max_output_tokens"] = max_output_tokens(params["max_output_tokens"], "response.max_output_tokens")
    out = _optional_dict(_optional_dict(params.get("audio"), "response.audio").get("output"),
                         "response.audio.output")
    if "voice" in out:
        overrides["voice"] = voice(out["voice"], voices, "response.audio.output.voice")
    return overrides
