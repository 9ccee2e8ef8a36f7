"""The Containerfile's image, built and run with podman as these machines allow it (docs/
deploying.md): images kept in the build tree (build/podman, reused from run to run, so only what
changed is built again), runc without systemd, the host's network, ulimits stated."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "build" / "podman"
BUILD = ROOT / "deploy" / "container" / "build-image.sh"
#: What podman gives conmon, the parent of a container's runtime: a container may have no more
#: processes (deploy/container/ulimits.sh).
CONMON_NPROC = 32768


def podman() -> list[str]:
    """podman with this project's own image storage. The run root (locks, container state) is
    short and fixed per storage folder: podman refuses a storage that moves run roots, and Unix
    socket paths under it must stay short."""
    key = hashlib.sha1(str(STORAGE).encode()).hexdigest()[:12]
    run = Path(tempfile.gettempdir()) / f"ssekd-podman-{key}"
    return ["podman", "--root", str(STORAGE), "--runroot", str(run), "--tmpdir", str(run / "tmp"),
            "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file"]


def ulimits() -> list[str]:
    """The --ulimit options: this process's own limits, which a container may not raise."""
    nofile, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if nproc == resource.RLIM_INFINITY or nproc > CONMON_NPROC:
        nproc = CONMON_NPROC
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def kernel_refusal() -> str | None:
    """Why this kernel runs no containers, or None when it does: podman needs new mount, PID,
    IPC and UTS namespaces (and, without root, a user namespace)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None  # util-linux is essential on Debian; let podman say what it lacks
    args = [unshare, "--mount", "--pid", "--ipc", "--uts", "--fork"]
    if os.geteuid() != 0:
        args += ["--user", "--map-root-user"]
    done = subprocess.run([*args, "true"], capture_output=True, text=True, timeout=30)
    if done.returncode == 0:
        return None
    return f"the kernel refuses the namespaces a container needs: {done.stderr.strip()}"


@dataclass(frozen=True)
class Image:
    tag: str
    #: seconds `make image`'s script took in this run, and what it said each part took
    seconds: float
    parts: str
    size: int


def build(tag: str) -> Image:
    """deploy/container/build-image.sh, as `make image` runs it, into this project's storage."""
    env = dict(os.environ, PODMAN=" ".join(podman()), PIP=str(Path(sys.executable).with_name("pip")))
    started = time.monotonic()
    done = subprocess.run([str(BUILD), tag], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        noise = re.compile(r"^WARNING: Location .* is ignored", re.MULTILINE)
        raise AssertionError(f"{BUILD.name} failed ({done.returncode}):\n{done.stdout}\n"
                             + noise.sub("", done.stderr)[-6000:])
    size = int(inspect(tag, "{{.Size}}"))
    # Layers the build no longer uses (an earlier version of ssekd's code) go after a day; newer
    # ones stay for the next build to reuse. Only this storage, which holds nothing else
    # (build-image.sh prunes nothing: `make image` builds into the machine's own storage).
    run("image", "prune", "--force", "--filter", "until=24h", timeout=300)
    return Image(tag, seconds, done.stdout.strip().splitlines()[-1], size)


def inspect(name: str, template: str, kind: str = "image") -> str:
    done = subprocess.run([*podman(), kind, "inspect", "--format", template, name],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def run(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*podman(), *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done
