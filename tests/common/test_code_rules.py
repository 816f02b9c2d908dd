"""Rules the code base keeps, checked on every file under services/ and tools/: small single-job files, and no
journal entries (dates, commit ids) in code, where they go stale; figures and their dates live in docs/ and the
bench's results. The lint itself (ruff, settings in pyproject.toml) runs first in `make test`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
# 2026-12-06 or 2026/12/06: a date; 7 to 40 hex characters mixing digits and letters, standing alone: a commit id
# (a SHA-256 checksum is 64 and is not one).
DATE = re.compile(r"\b20\d\d[-/](0[1-9]|1[0-2])[-/](0[1-9]|[12]\d|3[01])\b")
COMMIT = re.compile(r"(?<![0-9a-fA-F])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9a-fA-F])")
SKIPPED = ("vendor", "__pycache__")


def code_files() -> list[Path]:
    return sorted(p for top in ("services", "tools") for p in (ROOT / top).rglob("*")
                  if p.is_file() and not set(p.relative_to(ROOT).parts) & set(SKIPPED)
                  and p.suffix in (".py", ".js", ".html", ".css", ".txt"))


def test_the_rules_see_the_code() -> None:
    files = {str(p.relative_to(ROOT)) for p in code_files()}
    assert "services/gateway/server.py" in files and "services/gateway/static/js/main.js" in files


def test_every_file_under_services_and_tools_is_at_most_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in code_files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these into single-job modules of at most {MAX_LINES} lines: {long}"


def test_no_file_under_services_and_tools_carries_a_date_or_a_commit_id() -> None:
    found = []
    for path in code_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (match := DATE.search(line) or COMMIT.search(line)) is not None:
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert found == [], "dates and commit ids belong in docs/ and the bench's results, not in code: " + str(found)


@pytest.mark.parametrize(("line", "flagged"), [("measured on 2026-12-05", True), ("see commit fe9d274", True),
                                               ("sha256 " + "ab12" * 16, False), ("deadline_s = 2000", False),
                                               ("a face of decade", False)])
def test_the_patterns_flag_dates_and_commit_ids_and_nothing_else(line: str, flagged: bool) -> None:
    assert bool(DATE.search(line) or COMMIT.search(line)) is flagged
