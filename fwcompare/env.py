"""Environment and fairness manifest: what ran, where, with which settings.

The parent process reads versions from package metadata, so nothing heavy is
imported to describe the environment; each worker adds what only the running
framework can say (its thread count, device name, TF32 flags) to its rows.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from importlib import metadata

import psutil

from .paths import ROOT

PACKAGES = ("fwcompare", "torch", "tensorflow", "tf-keras", "transformers", "jax", "jaxlib",
            "flax", "numpy", "scipy", "pandas", "papermill", "onnx", "onnxscript", "onnxruntime",
            "tf2onnx", "ai-edge-litert")


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict]:
    """GPUs seen by nvidia-smi (name, memory, driver); empty without one."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [r.split(", ") for r in text.strip().splitlines() if r.strip()]
    return [dict(zip(("name", "memory_total", "driver"), r)) for r in rows]


def git_info(root: Path = ROOT) -> dict:
    """The commit of fwcompare's own checkout at ``root`` and whether its
    tracked files changed; "unknown" when ``root`` is not the top of a git
    checkout (an unpacked copy inside another repository must not record
    that repository's commit)."""
    unknown = {"git_commit": "unknown", "git_dirty": False}

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=10)
    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(root).resolve():
            return unknown
        commit = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return unknown
    if commit.returncode != 0:
        return unknown
    return {"git_commit": commit.stdout.strip(), "git_dirty": bool(status.stdout.strip())}


def params_hash(params: dict) -> str:
    blob = json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def manifest(params: dict | None = None) -> dict:
    """The manifest of this machine now (timestamp taken at the call)."""
    vm = psutil.virtual_memory()
    gpu_list = gpus()
    m = {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_logical_cores": os.cpu_count(),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_cores_available": default_threads(),
        "memory_total_bytes": vm.total,
        "gpus": gpu_list,
        "versions": versions(),
        **git_info(),
    }
    if params is not None:
        m["params_hash"] = params_hash(params)
        m["threads"] = params.get("threads")
    return m


def hardware_line(m: dict) -> str:
    """One line naming the hardware and versions, for figure footers."""
    v = m.get("versions", {})
    gpu = "; GPU " + m["gpus"][0]["name"] if m.get("gpus") else ""
    return (f"{m.get('cpu_model', '?')} ({m.get('cpu_cores_available', '?')} cores){gpu} | "
            f"torch {v.get('torch')}, tensorflow {v.get('tensorflow')}, jax {v.get('jax')}, "
            f"transformers {v.get('transformers')} | commit {str(m.get('git_commit', ''))[:8]}"
            f"{'+dirty' if m.get('git_dirty') else ''}")
