"""The component floor of `make bench-peers`: how soon the parts alone could answer one clip, in this process
with no pipeline around them.

Sum of each engine's own first-output time: the end-of-turn decision (the audio the endpointer must hear after
the end of speech, Silero then smart-turn at Sotto's defaults, plus the turn model's own run), the recogniser
on the final audio (Whisper, as the asr service runs it), the LLM's first token on those words, and the voice's
first chunk of the reply's first unit. The engines are built by the services' own loaders from the stack's
settings (as `tools.bench.direct` does), so the floor uses what both pipelines run. No real pipeline reaches it:
each stage needs the previous one's output, and the rest of the first unit is decoded between the LLM's first
token and the voice's first chunk (`first_unit_ms`, shown but not summed).
"""

from __future__ import annotations

import time

import numpy as np

from services.asr.loading import load_engine as load_asr
from services.common import config
from services.vad.engine import SpeechEventKind, pcm16_to_float
from services.vad.loading import default_settings, load_turn_model
from tools.bench.direct import DirectPath
from tools.bench.peers_clips import RATE, Clip

FRAME_MS = 32
TAIL_S = 3.0          # silence after the clip: more than the longest hold (SOTTO_VAD_MAX_TURN_SILENCE_MS)
ASR_PAD_S = 0.1       # audio after the end of speech the recogniser gets, as a VAD's cut leaves some
STAGES = ("endpoint_ms", "asr_ms", "llm_first_token_ms", "tts_first_chunk_ms")


class Floor:
    def __init__(self, env: dict[str, str], model_path: str) -> None:
        common = config.load(config.CommonConfig, env)
        vad_cfg = config.load(config.VadConfig, env)
        self.direct = DirectPath(env, model_path)
        self.settings = default_settings(vad_cfg)
        self.turn_model = load_turn_model(vad_cfg, common)
        self.asr, _ = load_asr(config.load(config.AsrConfig, env), common)

    def endpoint_ms(self, clip: Clip) -> float | None:
        """ms from the clip's end of speech to the end-of-turn decision: audio heard until the decision, plus
        the wall time of the turn model's run (the audio is pushed faster than real time, so only the model's
        own compute is timed)."""
        audio = clip.pcm16 + bytes(int(TAIL_S * RATE) * 2)
        step = RATE * FRAME_MS // 1000 * 2
        with self.direct.vad.open_stream(RATE, self.settings, turn_model=self.turn_model) as stream:
            for i in range(0, len(audio), step):
                events = stream.push(audio[i:i + step])
                model_ms = 0.0
                if stream.verdict_due:
                    began = time.perf_counter()
                    events += stream.decide()
                    model_ms = (time.perf_counter() - began) * 1000
                for event in events:
                    if event.kind is SpeechEventKind.ENDED:
                        heard_ms = event.processed_samples * 1000 / RATE - clip.speech_end_s * 1000
                        return round(heard_ms + model_ms, 1)
        return None

    def recognise(self, clip: Clip) -> tuple[str, float]:
        end = int((clip.speech_end_s + ASR_PAD_S) * RATE) * 2
        samples = pcm16_to_float(clip.pcm16[:end])
        began = time.perf_counter()
        words = self.asr.transcribe(np.ascontiguousarray(samples, dtype=np.float32)).text
        return words, round((time.perf_counter() - began) * 1000, 1)

    def measure(self, clip: Clip) -> dict:
        endpoint = self.endpoint_ms(clip)
        words, asr_ms = self.recognise(clip)
        turn = self.direct.first_audio(self.direct.request(text=words or clip.text))
        row = {"clip": clip.name, "endpoint_ms": endpoint, "asr_ms": asr_ms, "words": words,
               "llm_first_token_ms": turn.first_token_ms, "tts_first_chunk_ms": turn.tts_first_chunk_ms,
               "first_unit_ms": None if None in (turn.first_sentence_ms, turn.first_token_ms)
               else round(turn.first_sentence_ms - turn.first_token_ms, 1), "reply": turn.reply}
        parts = [row[s] for s in STAGES]
        row["floor_ms"] = None if None in parts else round(sum(parts), 1)
        return row

    def close(self) -> None:
        self.direct.close()
