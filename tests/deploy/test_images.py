"""Rebuilding the images does not fill the disk: what a build supersedes is removed, on a real engine.

Two tiny images stand in for two builds of one service (a build of the real images takes minutes): each is
imported with the Dockerfile's labels under one tag, so the first becomes untagged as a rebuild leaves it.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

from tools.compose import engine, images

pytestmark = [pytest.mark.docker]


@pytest.fixture
def docker():
    avail = engine.availability()
    if not avail.ok:
        pytest.skip(avail.problem)
    return engine.client(avail=avail)


def _import(docker, tmp_path: Path, tag: str, stage: str, service: str, content: str) -> str:
    """A one-file image with the Dockerfile's labels; returns its id."""
    labels = f"LABEL dev.sotto.stage={stage} dev.sotto.service={service}"
    image = docker.image.import_(_tar(tmp_path, content), tag, changes=[labels])
    return image.id


def test_a_rebuild_removes_what_it_superseded_and_nothing_else(docker, tmp_path: Path) -> None:
    name = f"sotto-prune-test-{uuid.uuid4().hex[:8]}"
    service = f"svc{uuid.uuid4().hex[:6]}"
    made: list[str] = []
    try:
        old_runtime = _import(docker, tmp_path, f"{name}/runtime:dev", "runtime", service, "one")
        new_runtime = _import(docker, tmp_path, f"{name}/runtime:dev", "runtime", service, "two")
        # Build stages are never tagged: the older two are superseded, the newest is the next build's cache.
        # A tag moved to a later import leaves the earlier image untagged, as a rebuild leaves it.
        stages = [_import(docker, tmp_path, f"{name}/stage:dev", "build", service, f"stage {i}") for i in range(3)]
        unlabelled = docker.image.import_(_tar(tmp_path, "not ours"), f"{name}/stage:dev").id  # takes the tag
        placeholder = docker.image.import_(_tar(tmp_path, "tag holder"), f"{name}/stage:dev").id
        made += [old_runtime, new_runtime, *stages, unlabelled, placeholder]
        assert all(not docker.image.inspect(i).repo_tags for i in (old_runtime, *stages, unlabelled))

        images.prune_superseded(docker)

        assert not docker.image.exists(old_runtime), "the superseded service image is still on the disk"
        assert docker.image.exists(new_runtime), "the current service image was removed"
        assert not docker.image.exists(stages[0]) and not docker.image.exists(stages[1]), \
            "superseded build stages are still on the disk"
        assert docker.image.exists(stages[2]), "the newest build stage (the next build's cache) was removed"
        assert docker.image.exists(unlabelled), "an image that is not Sotto's was removed"
    finally:
        for image_id in made:
            if docker.image.exists(image_id):
                docker.image.remove(image_id, force=True)


def _tar(tmp_path: Path, content: str) -> Path:
    tarball = tmp_path / f"{uuid.uuid4().hex}.tar"
    with tarfile.open(tarball, "w") as tar:
        data = content.encode()
        info = tarfile.TarInfo("marker")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return tarball
