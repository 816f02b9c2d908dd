"""The gateway's application state, under typed `web.AppKey`s (aiohttp's "no singletons"), and the model catalogue.

Every wire reads these keys from here, not from another wire's module. The catalogue is what the gateway has
learnt of the models (asked once per start of each service, `server.refresh_model_info`): sessions read it, and
only that refresh replaces it, whole, so no session sees a half-updated one and none can change it for the others.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from services.common import config
from services.gateway.conversation.settings import SessionSettings
from services.gateway.links.dependencies import Dependencies


@dataclass(frozen=True)
class LlmInfo:
    """The llm service's GetModelInfo, as `session.ready` reports it."""

    name: str
    backend: str
    backend_reason: str
    audio_input: bool
    image_input: bool
    fallback: bool
    note: str


@dataclass(frozen=True)
class ModelCatalogue:
    llm: LlmInfo | None = None                 # None until the llm service has answered
    voices: tuple[str, ...] = ()               # the tts service's voices (empty until it has answered)
    default_voice: str = ""

    @property
    def llm_name(self) -> str:
        return self.llm.name if self.llm is not None else ""

    @property
    def text_only(self) -> bool:
        """The llm takes no audio (say the offline SmolLM2): spoken turns go to it as their words (the cascade)."""
        return self.llm is not None and not self.llm.audio_input

    @property
    def sees(self) -> bool:
        """The llm takes images (or is not known yet): camera keyframes go with spoken turns. A text-only model (the
        offline SmolLM2) would refuse the whole turn for them."""
        return self.llm is None or self.llm.image_input

    def llm_fields(self) -> dict[str, Any]:
        return dataclasses.asdict(self.llm) if self.llm is not None else {}


class Catalogue:
    """The current `ModelCatalogue`, shared by every session; `current` is replaced, never changed in place."""

    def __init__(self) -> None:
        self.current = ModelCatalogue()

    def update(self, **changes: Any) -> None:
        self.current = dataclasses.replace(self.current, **changes)


SETTINGS = web.AppKey("settings", config.Settings)
DEPS = web.AppKey("deps", Dependencies)
SESSIONS = web.AppKey("sessions", weakref.WeakSet)
PER_CLIENT = web.AppKey("per_client", Counter)
MODELS = web.AppKey("models", Catalogue)
LIMITS = web.AppKey("limits", SessionSettings)  # the time limits in seconds, built once from SETTINGS
