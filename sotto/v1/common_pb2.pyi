from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Turn(_message.Message):
    __slots__ = ("role", "text", "interrupted", "audio_sha256")
    class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ROLE_UNSPECIFIED: _ClassVar[Turn.Role]
        ROLE_USER: _ClassVar[Turn.Role]
        ROLE_ASSISTANT: _ClassVar[Turn.Role]
    ROLE_UNSPECIFIED: Turn.Role
    ROLE_USER: Turn.Role
    ROLE_ASSISTANT: Turn.Role
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SHA256_FIELD_NUMBER: _ClassVar[int]
    role: Turn.Role
    text: str
    interrupted: bool
    audio_sha256: bytes
    def __init__(self, role: _Optional[_Union[Turn.Role, str]] = ..., text: _Optional[str] = ..., interrupted: _Optional[bool] = ..., audio_sha256: _Optional[bytes] = ...) -> None: ...
