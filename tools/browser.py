"""Headless Chromium for the page: the executable and the flags every launch needs (tests/browser, tools/eval)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("SOTTO_CHROMIUM", "/usr/bin/chromium")

# The profile is a fresh temporary --user-data-dir made by playwright for each launch.
BASE_ARGS = [
    "--no-sandbox",  # tests run as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # without these Chromium keeps calling home, which floods a closed network
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
