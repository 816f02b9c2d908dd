from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VoiceConfig(_message.Message):
    __slots__ = ("voice", "speed", "language")
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    voice: str
    speed: float
    language: str
    def __init__(self, voice: _Optional[str] = ..., speed: _Optional[float] = ..., language: _Optional[str] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("text", "config", "turn_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    config: VoiceConfig
    turn_id: str
    def __init__(self, text: _Optional[str] = ..., config: _Optional[_Union[VoiceConfig, _Mapping]] = ..., turn_id: _Optional[str] = ...) -> None: ...

class SynthesizeStreamRequest(_message.Message):
    __slots__ = ("config", "text", "turn_id")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    config: VoiceConfig
    text: str
    turn_id: str
    def __init__(self, config: _Optional[_Union[VoiceConfig, _Mapping]] = ..., text: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class AudioOut(_message.Message):
    __slots__ = ("pcm16", "sample_rate", "sentence_index", "text_start", "text_end", "sentence_text", "sample_offset", "sentence_end")
    PCM16_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_START_FIELD_NUMBER: _ClassVar[int]
    TEXT_END_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_TEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_END_FIELD_NUMBER: _ClassVar[int]
    pcm16: bytes
    sample_rate: int
    sentence_index: int
    text_start: int
    text_end: int
    sentence_text: str
    sample_offset: int
    sentence_end: bool
    def __init__(self, pcm16: _Optional[bytes] = ..., sample_rate: _Optional[int] = ..., sentence_index: _Optional[int] = ..., text_start: _Optional[int] = ..., text_end: _Optional[int] = ..., sentence_text: _Optional[str] = ..., sample_offset: _Optional[int] = ..., sentence_end: _Optional[bool] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Voice(_message.Message):
    __slots__ = ("name", "language")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    language: str
    def __init__(self, name: _Optional[str] = ..., language: _Optional[str] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("voices", "default_voice")
    VOICES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VOICE_FIELD_NUMBER: _ClassVar[int]
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    default_voice: str
    def __init__(self, voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ..., default_voice: _Optional[str] = ...) -> None: ...
