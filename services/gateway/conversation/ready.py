"""What `session.ready` says: how the session was opened, the session's limits and how it takes turns, and what the
gateway knows of the models and their health at that moment (built once per session, here, so the core stays short).
"""

from __future__ import annotations

from services.common import config
from services.gateway.app import ModelCatalogue
from services.gateway.conversation import events
from services.gateway.conversation.events import SAMPLE_RATE_OUT
from services.gateway.conversation.inputs import Opening


def session_ready(session_id: str, start: Opening, cfg: config.Settings, models: ModelCatalogue,
                  health: dict[str, str]) -> events.SessionReady:
    gw, v = cfg.gateway, cfg.vad
    limits = {"max_audio_frame_bytes": gw.max_audio_frame_bytes, "max_jpeg_bytes": gw.max_jpeg_bytes,
              "max_image_pixels": gw.max_image_pixels, "max_messages_per_s": gw.max_messages_per_s,
              "max_text_chars": gw.max_text_chars, "max_turn_audio_s": gw.max_turn_audio_s,
              "jitter_ms": gw.jitter_ms, "request_timeout_ms": gw.request_timeout_ms}
    turn = {"semantic": v.semantic_turn, "silence_ms": v.turn_silence_ms, "max_silence_ms": v.max_turn_silence_ms,
            "barge_in_threshold": v.barge_in_threshold, "barge_in_min_speech_ms": v.barge_in_min_speech_ms,
            "barge_in_level_db": v.barge_in_level_db, "echo_cancel": start.echo_cancel,
            # speech over an answer ducks it (turn.duck) and the server decides the cut (conversation/backchannel.py)
            "backchannel": gw.backchannel, "duck_db": gw.duck_db}
    return events.SessionReady(
        session_id=session_id, sample_rate_in=start.sample_rate, sample_rate_out=SAMPLE_RATE_OUT,
        voices=list(models.voices), voice=start.voice or gw.voice or models.default_voice,
        model=models.llm_fields(), limits=limits, health=dict(health), turn=turn)
