from sotto.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    STOP: _ClassVar[FinishReason]
    LENGTH: _ClassVar[FinishReason]
    CANCELLED: _ClassVar[FinishReason]
    DEGRADED: _ClassVar[FinishReason]
FINISH_REASON_UNSPECIFIED: FinishReason
STOP: FinishReason
LENGTH: FinishReason
CANCELLED: FinishReason
DEGRADED: FinishReason

class Image(_message.Message):
    __slots__ = ("data", "mime_type", "capture_ts_ms")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TS_MS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    capture_ts_ms: int
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., capture_ts_ms: _Optional[int] = ...) -> None: ...

class UserContent(_message.Message):
    __slots__ = ("audio_wav", "images", "text")
    AUDIO_WAV_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    audio_wav: bytes
    images: _containers.RepeatedCompositeFieldContainer[Image]
    text: str
    def __init__(self, audio_wav: _Optional[bytes] = ..., images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., text: _Optional[str] = ...) -> None: ...

class Sampling(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "seed", "max_new_tokens")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    seed: int
    max_new_tokens: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., max_new_tokens: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("session_id", "turn_id", "system_prompt", "history", "user", "sampling")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    system_prompt: str
    history: _containers.RepeatedCompositeFieldContainer[_common_pb2.Turn]
    user: UserContent
    sampling: Sampling
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., system_prompt: _Optional[str] = ..., history: _Optional[_Iterable[_Union[_common_pb2.Turn, _Mapping]]] = ..., user: _Optional[_Union[UserContent, _Mapping]] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ...) -> None: ...

class GenerateTimings(_message.Message):
    __slots__ = ("queue_wait_ms", "time_to_first_token_ms", "prefill_tokens", "decode_tokens", "prefill_tokens_per_s", "decode_tokens_per_s", "total_ms", "reused_conversation")
    QUEUE_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    REUSED_CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    queue_wait_ms: float
    time_to_first_token_ms: float
    prefill_tokens: int
    decode_tokens: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    total_ms: float
    reused_conversation: bool
    def __init__(self, queue_wait_ms: _Optional[float] = ..., time_to_first_token_ms: _Optional[float] = ..., prefill_tokens: _Optional[int] = ..., decode_tokens: _Optional[int] = ..., prefill_tokens_per_s: _Optional[float] = ..., decode_tokens_per_s: _Optional[float] = ..., total_ms: _Optional[float] = ..., reused_conversation: _Optional[bool] = ...) -> None: ...

class GenerateDone(_message.Message):
    __slots__ = ("finish_reason", "timings", "text")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    finish_reason: FinishReason
    timings: GenerateTimings
    text: str
    def __init__(self, finish_reason: _Optional[_Union[FinishReason, str]] = ..., timings: _Optional[_Union[GenerateTimings, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("text_delta", "done")
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    text_delta: str
    done: GenerateDone
    def __init__(self, text_delta: _Optional[str] = ..., done: _Optional[_Union[GenerateDone, _Mapping]] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("model", "backend", "audio_input", "image_input", "context_tokens", "fallback", "note", "backend_reason")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    AUDIO_INPUT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_INPUT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_REASON_FIELD_NUMBER: _ClassVar[int]
    model: str
    backend: str
    audio_input: bool
    image_input: bool
    context_tokens: int
    fallback: bool
    note: str
    backend_reason: str
    def __init__(self, model: _Optional[str] = ..., backend: _Optional[str] = ..., audio_input: _Optional[bool] = ..., image_input: _Optional[bool] = ..., context_tokens: _Optional[int] = ..., fallback: _Optional[bool] = ..., note: _Optional[str] = ..., backend_reason: _Optional[str] = ...) -> None: ...
