"""What the container tests share: why they cannot run here (the missing piece, named), and building the images
once per test session (on two cores a build takes minutes; both the compose and the swarm test use the same)."""

from __future__ import annotations

import os
import shutil

from tools.compose import engine, images

_built: list[bool] = []


def why_not_runnable() -> str | None:
    avail = engine.availability()
    if not avail.ok:
        return avail.problem
    base = os.environ.get("SOTTO_BASE_IMAGE") or images.DEFAULT_BASE_IMAGE
    if not engine.client(avail=avail).image.exists(base):
        if os.environ.get("SOTTO_BASE_IMAGE"):
            return f"SOTTO_BASE_IMAGE={base} is not an image the engine has"
        if os.geteuid() != 0 or shutil.which("debootstrap") is None:
            return (f"base image {base} is missing and cannot be built here: `python -m tools.compose base` needs "
                    f"root and debootstrap (euid {os.geteuid()}, debootstrap "
                    f"{'found' if shutil.which('debootstrap') else 'not found'})")
    return None


def build_once(docker) -> None:
    """Base (if missing), wheelhouse and service images from this checkout, the first time a test asks.

    SOTTO_TEST_IMAGES=reuse takes the sotto/*:dev images as they are (a developer re-running a test on images
    just built); CI leaves it unset, so it tests the checkout."""
    if os.environ.get("SOTTO_TEST_IMAGES") == "reuse":
        return
    if not _built:
        images.build(docker)
        _built.append(True)
