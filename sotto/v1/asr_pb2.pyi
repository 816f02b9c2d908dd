from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AsrSettings(_message.Message):
    __slots__ = ("sample_rate", "language", "partials")
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PARTIALS_FIELD_NUMBER: _ClassVar[int]
    sample_rate: int
    language: str
    partials: bool
    def __init__(self, sample_rate: _Optional[int] = ..., language: _Optional[str] = ..., partials: _Optional[bool] = ...) -> None: ...

class AsrRequest(_message.Message):
    __slots__ = ("settings", "pcm16", "end", "utterance_samples")
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    settings: AsrSettings
    pcm16: bytes
    end: bool
    utterance_samples: int
    def __init__(self, settings: _Optional[_Union[AsrSettings, _Mapping]] = ..., pcm16: _Optional[bytes] = ..., end: _Optional[bool] = ..., utterance_samples: _Optional[int] = ...) -> None: ...

class Transcript(_message.Message):
    __slots__ = ("text", "audio_ms", "recognition_ms", "stable_chars", "partial_runs", "covered")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    RECOGNITION_MS_FIELD_NUMBER: _ClassVar[int]
    STABLE_CHARS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RUNS_FIELD_NUMBER: _ClassVar[int]
    COVERED_FIELD_NUMBER: _ClassVar[int]
    text: str
    audio_ms: float
    recognition_ms: float
    stable_chars: int
    partial_runs: int
    covered: bool
    def __init__(self, text: _Optional[str] = ..., audio_ms: _Optional[float] = ..., recognition_ms: _Optional[float] = ..., stable_chars: _Optional[int] = ..., partial_runs: _Optional[int] = ..., covered: _Optional[bool] = ...) -> None: ...

class AsrEvent(_message.Message):
    __slots__ = ("stable", "final")
    STABLE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    stable: str
    final: Transcript
    def __init__(self, stable: _Optional[str] = ..., final: _Optional[_Union[Transcript, _Mapping]] = ...) -> None: ...

class TranscribeRequest(_message.Message):
    __slots__ = ("wav", "pcm16", "sample_rate", "language")
    WAV_FIELD_NUMBER: _ClassVar[int]
    PCM16_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    wav: bytes
    pcm16: bytes
    sample_rate: int
    language: str
    def __init__(self, wav: _Optional[bytes] = ..., pcm16: _Optional[bytes] = ..., sample_rate: _Optional[int] = ..., language: _Optional[str] = ...) -> None: ...
