from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VadSettings(_message.Message):
    __slots__ = ("threshold", "min_speech_ms", "min_silence_ms", "speech_pad_ms", "emit_probabilities", "turn_silence_ms", "max_turn_silence_ms", "silence_only", "barge_in_threshold", "barge_in_min_speech_ms")
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MIN_SPEECH_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    SPEECH_PAD_MS_FIELD_NUMBER: _ClassVar[int]
    EMIT_PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    TURN_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_TURN_SILENCE_MS_FIELD_NUMBER: _ClassVar[int]
    SILENCE_ONLY_FIELD_NUMBER: _ClassVar[int]
    BARGE_IN_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    BARGE_IN_MIN_SPEECH_MS_FIELD_NUMBER: _ClassVar[int]
    threshold: float
    min_speech_ms: int
    min_silence_ms: int
    speech_pad_ms: int
    emit_probabilities: bool
    turn_silence_ms: int
    max_turn_silence_ms: int
    silence_only: bool
    barge_in_threshold: float
    barge_in_min_speech_ms: int
    def __init__(self, threshold: _Optional[float] = ..., min_speech_ms: _Optional[int] = ..., min_silence_ms: _Optional[int] = ..., speech_pad_ms: _Optional[int] = ..., emit_probabilities: _Optional[bool] = ..., turn_silence_ms: _Optional[int] = ..., max_turn_silence_ms: _Optional[int] = ..., silence_only: _Optional[bool] = ..., barge_in_threshold: _Optional[float] = ..., barge_in_min_speech_ms: _Optional[int] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("pcm16", "sample_rate", "sequence", "capture_ts_ms")
    PCM16_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TS_MS_FIELD_NUMBER: _ClassVar[int]
    pcm16: bytes
    sample_rate: int
    sequence: int
    capture_ts_ms: int
    def __init__(self, pcm16: _Optional[bytes] = ..., sample_rate: _Optional[int] = ..., sequence: _Optional[int] = ..., capture_ts_ms: _Optional[int] = ...) -> None: ...

class VadRequest(_message.Message):
    __slots__ = ("settings", "audio", "end_of_speech", "ask_verdict", "answer_playing")
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    END_OF_SPEECH_FIELD_NUMBER: _ClassVar[int]
    ASK_VERDICT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_PLAYING_FIELD_NUMBER: _ClassVar[int]
    settings: VadSettings
    audio: AudioChunk
    end_of_speech: bool
    ask_verdict: bool
    answer_playing: bool
    def __init__(self, settings: _Optional[_Union[VadSettings, _Mapping]] = ..., audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., end_of_speech: _Optional[bool] = ..., ask_verdict: _Optional[bool] = ..., answer_playing: _Optional[bool] = ...) -> None: ...

class VadEvent(_message.Message):
    __slots__ = ("kind", "start_sample", "end_sample", "start_ts_ms", "end_ts_ms", "probability", "processed_samples", "turn_probability")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[VadEvent.Kind]
        SPEECH_STARTED: _ClassVar[VadEvent.Kind]
        SPEECH_ENDED: _ClassVar[VadEvent.Kind]
        PROBABILITY: _ClassVar[VadEvent.Kind]
        TURN_HELD: _ClassVar[VadEvent.Kind]
    KIND_UNSPECIFIED: VadEvent.Kind
    SPEECH_STARTED: VadEvent.Kind
    SPEECH_ENDED: VadEvent.Kind
    PROBABILITY: VadEvent.Kind
    TURN_HELD: VadEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    START_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    END_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    START_TS_MS_FIELD_NUMBER: _ClassVar[int]
    END_TS_MS_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TURN_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    kind: VadEvent.Kind
    start_sample: int
    end_sample: int
    start_ts_ms: int
    end_ts_ms: int
    probability: float
    processed_samples: int
    turn_probability: float
    def __init__(self, kind: _Optional[_Union[VadEvent.Kind, str]] = ..., start_sample: _Optional[int] = ..., end_sample: _Optional[int] = ..., start_ts_ms: _Optional[int] = ..., end_ts_ms: _Optional[int] = ..., probability: _Optional[float] = ..., processed_samples: _Optional[int] = ..., turn_probability: _Optional[float] = ...) -> None: ...
