"""Fetch the default models before `make up` starts the services, with huggingface_hub's progress bars.

Exit status 0: the llm and tts models are at hand (explicit path, cache or just downloaded). Status 1: one is
not, and the message says which; `make up` then builds the offline kit, which the services fall back to.
"""

from __future__ import annotations

import sys

from services.common import config, models
from services.tts import models as tts_models
from services.tts.engine import default_backend


def main() -> int:
    settings = config.exit_on_error(config.load_all)
    common, llm, tts = settings.common, settings.llm, settings.tts
    missing = []
    try:
        path = models.resolve(models.HubFile(llm.hf_repo, llm.hf_file), llm.model, "SOTTO_LLM_MODEL", common)
        print(f"llm model: {path}")
    except models.ModelUnavailable as exc:
        missing.append(f"llm: {exc}")
    backend = default_backend() if tts.engine == "auto" else tts.engine
    try:
        if backend == "piper":  # the voice comes with the `tts` extra: nothing to fetch
            print(f"tts voices (piper): {', '.join(tts_models.piper_voices(tts.model))}")
        elif tts.model is None:
            for hub in tts_models.HUB_FILES[backend]:
                path = models.resolve(hub, None, "SOTTO_TTS_MODEL", common)
            print(f"tts model ({backend}): {path.parent}")
    except models.ModelUnavailable as exc:
        missing.append(f"tts: {exc}")
    for line in missing:
        print(line, file=sys.stderr)
    if missing:
        print("the default models are not at hand; the offline kit is used instead", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
