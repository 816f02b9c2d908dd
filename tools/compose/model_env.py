"""The container side of SOTTO_MODEL_DIR: which variables compose must see so the containers find their models,
kept under the run folder so `scale` reuses what `up` chose."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tools.compose.common import ComposeError, run_dir

CONTAINER_MODEL_DIR = "/models"
MODEL_PATH_VARS = ("SOTTO_VAD_MODEL", "SOTTO_VAD_TURN_MODEL", "SOTTO_LLM_MODEL", "SOTTO_LLM_FALLBACK_MODEL",
                   "SOTTO_TTS_MODEL", "SOTTO_ASR_MODEL")


def host_model_dir(environ: dict[str, str]) -> Path:
    default = Path(environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sotto" / "models"
    return Path(environ.get("SOTTO_MODEL_DIR") or default).expanduser().resolve()


def container_env(environ: dict[str, str], host_models: bool) -> dict[str, str]:
    """The variables compose must see so the containers find their models.

    With host_models the host's SOTTO_MODEL_DIR is mounted at /models and the containers run as its owner (unless
    that is root: then as uid 10001, reading through the folder's permissions). SOTTO_*_MODEL paths that point
    under it are rewritten to /models/...; a host path elsewhere cannot be seen from a container and is refused.
    """
    out: dict[str, str] = {}
    models = host_model_dir(environ)
    if host_models:
        if not models.is_dir():
            raise ComposeError(f"--host-models: SOTTO_MODEL_DIR {models} is not a folder")
        out["SOTTO_MODEL_VOLUME"] = str(models)
        owner = models.stat()
        if owner.st_uid != 0:
            out["SOTTO_CONTAINER_USER"] = f"{owner.st_uid}:{owner.st_gid}"
    for var in MODEL_PATH_VARS:
        value = environ.get(var)
        if not value or value == CONTAINER_MODEL_DIR or value.startswith(CONTAINER_MODEL_DIR + "/"):
            continue
        path = Path(value).expanduser().resolve()
        if host_models and path.is_relative_to(models):
            out[var] = str(Path(CONTAINER_MODEL_DIR) / path.relative_to(models))
        else:
            raise ComposeError(
                f"{var}={value} is a path on this host, which the containers cannot see: put the model under "
                f"SOTTO_MODEL_DIR ({models}) and use --host-models, or give a path under {CONTAINER_MODEL_DIR}/ in "
                f"the models volume")
    return out


def env_file() -> Path:
    return run_dir() / "compose-env.json"


def apply_container_env(host_models: bool | None) -> dict[str, str]:
    """Compute (host_models given: `up`) or reload (None: `scale`) the variables, and export them to compose.

    `scale` reuses what `up` chose, so the running services keep their configuration and are not recreated.
    """
    if host_models is None:
        try:
            env = json.loads(env_file().read_text())
        except (OSError, ValueError):
            env = container_env(dict(os.environ), False)
    else:
        env = container_env(dict(os.environ), host_models)
        env_file().parent.mkdir(parents=True, exist_ok=True)
        env_file().write_text(json.dumps(env))
    os.environ.update(env)  # python-on-whales runs compose with this process's environment
    return env

