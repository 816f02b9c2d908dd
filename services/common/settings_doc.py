"""docs/settings.md, generated from the settings' own definitions (`python -m services.common.config`), so the
page cannot drift from what the processes accept."""

from __future__ import annotations

import dataclasses

from services.common.config import SECTIONS, accepted

SETTINGS_INTRO = """\
# Settings

Every setting is an environment variable, read and validated once when a process starts: a bad value stops the
process with a message naming the variable, the value and what it accepts. Each service reads the shared
settings and its own section; the runner (`make up`) passes the environment on to every process.

This page is generated from `services/common/config.py` (by `services/common/settings_doc.py`); after changing a
setting there, regenerate it with `python -m services.common.config > docs/settings.md` (a test fails while the two
differ).
"""

GRPC_NOTE = """\
One more variable is gRPC's own: every service process starts with
`GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener` unless the environment already sets it (an empty
value keeps gRPC's defaults). It halves the thread wake-ups of each gRPC call, which on a small machine slow the
first sentence's synthesis; the figures are in docs/performance.md.
"""


def _shown_default(f: dataclasses.Field) -> str:
    if f.metadata["shown"] is not None:
        return f"`{f.metadata['shown']}`"
    default = f.default
    if default in (None, ""):
        return "(unset)"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def markdown_table() -> str:
    """One row per setting, in declaration order: variable, default, accepted values, meaning."""
    rows = ["| variable | default | accepted | meaning |", "|---|---|---|---|"]
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            rows.append(f"| `{f.metadata['env']}` | {_shown_default(f)} | {accepted(f)} | {f.metadata['doc']} |")
    return "\n".join(rows)


def settings_markdown() -> str:
    """The whole of docs/settings.md."""
    return f"{SETTINGS_INTRO}\n{markdown_table()}\n\n{GRPC_NOTE}"
