"""How a `SOTTO_*` setting is declared, parsed and validated: the machinery under `services.common.config`.

Kept apart from the settings themselves so that the list of settings reads as a list.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar


class ConfigError(ValueError):
    """One or more `SOTTO_*` variables hold values the service cannot use."""


def setting(env: str, default: Any, doc: str, *, lo: float | None = None, hi: float | None = None,
            choices: tuple[str, ...] | None = None, shown: str | None = None) -> Any:
    """Declare a dataclass field bound to an environment variable, with its accepted range or choices.

    `shown` is the default as the documentation states it, where the value itself depends on the machine.
    """
    meta = {"env": env, "doc": doc, "lo": lo, "hi": hi, "choices": choices, "shown": shown}
    return field(default=default, metadata=meta)


def accepted(f: dataclasses.Field) -> str:
    m = f.metadata
    if m["choices"]:
        return "one of " + ", ".join(m["choices"])
    kind = {bool: "true or false", int: "an integer", float: "a number", str: "text", Path: "a path"}.get(
        _base_type(f), "a value")
    if m["lo"] is not None and m["hi"] is not None:
        return f"{kind} from {m['lo']} to {m['hi']}"
    if m["lo"] is not None:
        return f"{kind} >= {m['lo']}"
    return kind


def _base_type(f: dataclasses.Field) -> type:
    t = f.type if isinstance(f.type, str) else f.type.__name__
    t = t.replace(" | None", "").strip()
    return {"bool": bool, "int": int, "float": float, "str": str, "Path": Path}[t]


def _parse(f: dataclasses.Field, raw: str) -> Any:
    typ = _base_type(f)
    if typ is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError
    if typ is Path:
        return Path(os.path.expanduser(raw)) if raw else None
    value = typ(raw.strip()) if typ is not str else raw
    m = f.metadata
    if m["choices"] and value not in m["choices"]:
        raise ValueError
    if m["lo"] is not None and value < m["lo"]:
        raise ValueError
    if m["hi"] is not None and value > m["hi"]:
        raise ValueError
    return value


T = TypeVar("T")


def load(cls: type[T], environ: Mapping[str, str] | None = None) -> T:
    """Build `cls` from the environment; collect every bad value into one ConfigError."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in dataclasses.fields(cls):
        env = f.metadata.get("env")
        if env is None:
            continue
        if env in environ:
            raw = environ[env]
            try:
                values[f.name] = _parse(f, raw)
            except (ValueError, TypeError):
                problems.append(f"{env}={raw!r} is not valid: expected {accepted(f)}")
    if problems:
        raise ConfigError("; ".join(problems))
    return cls(**values)
