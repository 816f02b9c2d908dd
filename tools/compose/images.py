"""Building the images offline: the base image from Debian's packages, the wheelhouse for the engine's platform,
then the service images (the Dockerfile installs from the wheelhouse alone)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from python_on_whales import DockerClient, Image
from python_on_whales.exceptions import DockerException

from tools.compose.common import ROOT, ComposeError, say

WHEELHOUSE = ROOT / "build" / "wheelhouse"
EXTRAS = ("vad", "llm", "tts", "asr", "gateway")
DEFAULT_BASE_IMAGE = "sotto/base:bookworm"
BASE_SUITE = "bookworm"  # Debian 12: Python 3.11, glibc 2.36 (the wheelhouse's manylinux_2_36 target)
# libvulkan1: the Vulkan loader LiteRT-LM's GPU backend needs on Linux (compose.gpu.yaml); the GL vendor-neutral
# libraries (glvnd): the NVIDIA Vulkan ICD needs them and the NVIDIA container toolkit does not inject them (without
# them the loader finds the ICD and vkCreateInstance fails). Small, and unused on CPU. docs/gpu.md.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libvulkan1",
                 "libglvnd0", "libegl1", "libgl1", "libglx0", "libopengl0", "libgles2")
PYTHON_VERSION = "3.11"


def _apt_mirror() -> str | None:
    """The Debian mirror this host's apt uses (None: debootstrap's own default)."""
    sources = Path("/etc/apt/sources.list.d")
    for path in [*sorted(sources.glob("*.sources")), Path("/etc/apt/sources.list"), *sorted(sources.glob("*.list"))]:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            words = line.split()
            if path.suffix == ".sources" and words[:1] == ["URIs:"]:
                uris = [u for u in words[1:] if not u.rstrip("/").endswith("-security")]
                if uris:
                    return uris[0]
            if path.suffix == ".list" and words[:1] == ["deb"]:
                uri = next((w for w in words[1:] if "://" in w), None)
                if uri and not uri.rstrip("/").endswith("-security"):
                    return uri
    return None


def _host_codename() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None


def build_base(docker: DockerClient, tag: str = DEFAULT_BASE_IMAGE) -> None:
    """Make the base image from Debian's packages: no container registry involved.

    debootstrap (minbase + python3, python3-venv, ca-certificates), then, on a Debian 12 host, the host's apt
    sources are used inside to apply the security updates; apt's lists and caches are dropped; the tree is
    imported as an image.
    """
    if platform.system() != "Linux" or os.geteuid() != 0:
        raise ComposeError("building the base image needs Linux and root (debootstrap); elsewhere set "
                           "SOTTO_BASE_IMAGE to a Debian 12 image with python3 and python3-venv, e.g. "
                           "python:3.11-slim-bookworm")
    if shutil.which("debootstrap") is None:
        raise ComposeError("debootstrap is missing: apt-get install debootstrap (or set SOTTO_BASE_IMAGE)")
    mirror = _apt_mirror()
    scratch = Path(tempfile.mkdtemp(prefix="sotto-base-", dir=ROOT / "build" if (ROOT / "build").is_dir() else None))
    rootfs = scratch / "rootfs"
    try:
        say(f"debootstrap {BASE_SUITE} (minbase + {', '.join(BASE_PACKAGES)}) — about a minute")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", BASE_SUITE, str(rootfs)]
        subprocess.run(cmd + ([mirror] if mirror else []), check=True, stdout=subprocess.DEVNULL)
        host_sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
        if _host_codename() == BASE_SUITE and host_sources:
            say("applying Debian security updates inside the base")
            (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
            for src in host_sources:
                shutil.copyfile(src, rootfs / "etc/apt/sources.list.d" / src.name)
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            subprocess.run(["chroot", str(rootfs), "apt-get", "update", "-q"], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            subprocess.run(["chroot", str(rootfs), "apt-get", "-y", "-q", "upgrade"], check=True, env=env,
                           stdout=subprocess.DEVNULL)
        else:
            say("host is not Debian 12: the base has the suite's packages without later security updates")
        subprocess.run(["chroot", str(rootfs), "apt-get", "clean"], check=True)
        for junk in ("var/lib/apt/lists", "var/cache/apt", "var/log", "tmp"):
            path = rootfs / junk
            if path.is_dir():
                for child in path.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        tarball = scratch / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        docker.image.import_(tarball, tag, message=f"debootstrap {BASE_SUITE} minbase + {' '.join(BASE_PACKAGES)}",
                             changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                      "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]',
                                      f"LABEL org.opencontainers.image.created={created}",
                                      f"LABEL org.opencontainers.image.base.name=debian:{BASE_SUITE}"])
        say(f"base image {tag} ready")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def engine_platform(docker: DockerClient) -> str:
    """The manylinux platform tag of the engine's machine (not this host's: Docker Desktop runs a Linux VM)."""
    arch = (docker.info().architecture or platform.machine()).lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    if arch not in ("x86_64", "aarch64"):
        raise ComposeError(f"no wheels are built for engine architecture {arch!r}")
    return f"manylinux_2_36_{arch}"


SDIST_ONLY = ("docopt==0.6.2",)  # needed by num2words (tts)


def build_wheelhouse(plat: str) -> None:
    """The sotto wheel plus every dependency of every extra, as binary wheels for `plat` and CPython 3.11."""
    if WHEELHOUSE.exists():
        shutil.rmtree(WHEELHOUSE)
    WHEELHOUSE.mkdir(parents=True)
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)  # setuptools' scratch could leak stale modules
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    from tools import web_assets

    web_assets.build()  # the page's vendor files ship inside the wheel, as package data of the gateway
    say("building the sotto wheel")
    # A fixed timestamp makes the wheel byte-identical while the code is, so the image build's cache holds.
    env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "315532800")}
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(WHEELHOUSE), str(ROOT)], check=True,
                   env=env)
    wheel = next(WHEELHOUSE.glob("sotto-*.whl"))
    # Pure-Python dependencies published only as sdists cannot be fetched with --only-binary: build their
    # (platform-independent) wheels here, where the download below finds them.
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(WHEELHOUSE), *SDIST_ONLY], check=True)
    say(f"downloading dependencies for {plat}, CPython {PYTHON_VERSION}")
    # pip does not widen a manylinux_2_X tag to older glibc versions by itself: list them (PEP 600).
    arch = plat.split("_", 3)[3]
    glibc_minor = int(plat.split("_")[2])
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 16, -1)]
    platforms.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        platforms += [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    subprocess.run([*pip, "download", "-q", "--only-binary=:all:", *[a for p in platforms for a in ("--platform", p)],
                    "--python-version", PYTHON_VERSION, "--implementation", "cp", "--dest", str(WHEELHOUSE),
                    "--find-links", str(WHEELHOUSE),
                    f"sotto[{','.join(EXTRAS)}] @ {wheel.as_uri()}"], check=True)


def build(docker: DockerClient, services: Sequence[str] = ()) -> None:
    """Base image (if the default one is missing), wheelhouse, then the service images."""
    if not os.environ.get("SOTTO_BASE_IMAGE") and not docker.image.exists(DEFAULT_BASE_IMAGE):
        build_base(docker)
    build_wheelhouse(engine_platform(docker))
    say("building images " + (", ".join(services) if services else "for every service"))
    docker.compose.build(services=list(services) or None)
    prune_superseded(docker)


def prune_superseded(docker: DockerClient) -> None:
    """Remove the images a build left untagged: every superseded service image, and every build stage but the
    newest of each service (the next build's cache while the code is unchanged).

    Each build that changes the code leaves about 1.5 GB a service behind, untagged; the deploy tests build on
    every run, so without this a disk fills within days. Only images with the Dockerfile's `dev.sotto.stage`
    label are touched, never the engine's other images.
    """
    dangling = docker.image.list(filters={"dangling": "true", "label": "dev.sotto.stage"})
    newest_build: dict[str, Image] = {}
    for image in dangling:
        labels = image.config.labels or {}
        if labels.get("dev.sotto.stage") != "build":
            continue
        service = labels.get("dev.sotto.service", "")
        kept = newest_build.get(service)
        if kept is None or image.created > kept.created:
            newest_build[service] = image
    kept_ids = {image.id for image in newest_build.values()}
    superseded = [image for image in dangling if image.id not in kept_ids]
    removed = 0
    for image in superseded:
        try:
            docker.image.remove(image.id)
            removed += 1
        except DockerException as exc:  # still used by a container: kept, and said
            say(f"kept superseded image {image.id[:19]}: {(exc.stderr or '').strip() or 'in use'}")
    if removed:
        say(f"removed {removed} superseded image(s)")

