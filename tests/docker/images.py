"""The image the Docker tests run, built once and cached: ``mq:ci-<hash of its inputs>``.

Where no image registry answers (these machines), the base comes from
``docker/debootstrap-base.sh`` (Debian from the distribution's mirror, ``docker import``,
cached by its own key) and pip installs offline inside the build from a wheelhouse made
on this host (``pip wheel`` of mq's dependencies and of hatchling, cached by
pyproject.toml's hash) that is copied into the build context. ``MQ_DOCKER_BASE_IMAGE``
names another base (e.g. ``python:3.11-slim`` where a registry works).

The image's tag hashes everything that goes into it (the Dockerfile, pyproject.toml,
README.md, mq/, mirror/, loadtests/, the healthcheck, the base image's id): the same tree
never builds twice, and older ``mq:ci-*`` tags are removed after a build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "mq", "mirror", "loadtests")
DOCKER_FILES = ("docker/Dockerfile", "docker/healthcheck.py")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mq-docker"
TAG_PREFIX = "mq:ci-"


@dataclass
class Built:
    tag: str
    base: str
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def docker(*args: str, timeout_s: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done


def engine_problem() -> str | None:
    """Why Docker cannot run here (None: it can)."""
    if shutil.which("docker") is None:
        return "the docker command is not installed (Debian: apt-get install docker.io docker-compose)"
    try:
        info = docker("info", "--format", "{{.ServerVersion}}", timeout_s=30, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if info.returncode != 0:
        return f"no Docker engine answers (`docker info`: {info.stderr.strip()[:300]}); start dockerd"
    return None


def _files(paths: tuple[str, ...]) -> list[Path]:
    out = []
    for name in paths:
        path = REPO / name
        if path.is_file():
            out.append(path)
            continue
        out += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                      and p.suffix != ".pyc" and "results" not in p.relative_to(REPO).parts[:2])
    return out


def _digest(paths: list[Path], *extra: str) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()[:16]


def base_image(built: Built) -> str:
    """The base: $MQ_DOCKER_BASE_IMAGE, else one debootstrap builds (root), else an error."""
    named = os.environ.get("MQ_DOCKER_BASE_IMAGE")
    if named:
        built.notes.append(f"base {named} ($MQ_DOCKER_BASE_IMAGE)")
        return named
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        raise RuntimeError("no base image: debootstrap needs root and the debootstrap package "
                           "(or set MQ_DOCKER_BASE_IMAGE to a python:3.11-slim you can pull)")
    started = time.monotonic()
    done = subprocess.run([str(REPO / "docker" / "debootstrap-base.sh")], capture_output=True, text=True,
                          timeout=1200, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"docker/debootstrap-base.sh failed:\n{done.stderr[-4000:]}")
    built.timings["base_s"] = time.monotonic() - started
    built.notes.append(f"base {done.stdout.strip()} ({'cached' if 'cached' in done.stderr else 'built'})")
    return done.stdout.strip()


def wheelhouse(built: Built) -> Path:
    """Wheels of mq's dependencies and of hatchling for an offline build, cached by the
    dependency list (pip on this host reaches the index; pip in the build need not)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    requirements = sorted([*project["project"]["dependencies"], *project["build-system"]["requires"]])
    target = CACHE / f"wheels-{hashlib.sha256(chr(10).join(requirements).encode()).hexdigest()[:16]}"
    if target.is_dir():
        built.notes.append(f"wheels {target} (cached)")
        return target
    started = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="wheels-", dir=CACHE))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                           "--wheel-dir", str(tmp), *requirements], capture_output=True, text=True, timeout=900,
                          check=False)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"pip wheel failed:\n{done.stderr[-4000:]}")
    tmp.rename(target)
    built.timings["wheels_s"] = time.monotonic() - started
    built.notes.append(f"wheels {target} (built)")
    return target


def build_image() -> Built:
    """The image for this tree, built unless it exists (see the module docstring)."""
    built = Built(tag="", base="")
    built.base = base_image(built)
    base_id = docker("image", "inspect", "--format", "{{.Id}}", built.base, check=False).stdout.strip()
    if not base_id:
        raise RuntimeError(f"no base image {built.base} (pull or build it first)")
    built.tag = TAG_PREFIX + _digest(_files(SOURCES) + _files(DOCKER_FILES), base_id)
    if docker("image", "inspect", built.tag, check=False).returncode == 0:
        built.notes.append(f"image {built.tag} (cached)")
        return built
    wheels = wheelhouse(built)
    with tempfile.TemporaryDirectory(prefix="mq-docker-context-") as tmp:
        context = Path(tmp)
        for name in SOURCES:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc",
                                                                                      "results"))
            else:
                shutil.copy2(source, context / name)
        (context / "docker").mkdir()
        for name in DOCKER_FILES:
            shutil.copy2(REPO / name, context / name)
        shutil.copytree(wheels, context / "docker" / "wheels")
        shutil.copy2(REPO / ".dockerignore", context / ".dockerignore")
        started = time.monotonic()
        docker("build", "--quiet", "--tag", built.tag, "--build-arg", f"BASE_IMAGE={built.base}",
               "--build-arg", "WHEELS=docker/wheels", "--file", "docker/Dockerfile", str(context), timeout_s=1200)
        built.timings["build_s"] = time.monotonic() - started
    built.notes.append(f"image {built.tag} (built)")
    for line in docker("images", "--format", "{{.Repository}}:{{.Tag}}", "mq").stdout.split():
        if line.startswith(TAG_PREFIX) and line != built.tag:
            docker("rmi", line, check=False)  # an older tree's image
    return built
