"""Environment and fairness manifest: what ran, where, with which settings.

The parent process reads versions from package metadata, so nothing heavy is
imported to describe the environment; each worker adds what only the running
framework can say (its thread count, device name, TF32 flags) to its rows.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import socket
import subprocess
from pathlib import Path
from importlib import metadata

import psutil

from .paths import ROOT

# The packages every run records; each framework adds its own (its package's
# declaration, ``Framework.packages``, handed down by the frameworks registry
# through :func:`record_versions_of`: this module imports nothing above it).
PACKAGES = ("fwcompare", "transformers", "numpy", "scipy", "pandas", "papermill",
            "onnxruntime", "ai-edge-litert")
_FRAMEWORK_PACKAGES: list[str] = []


def record_versions_of(packages) -> None:
    """Record these packages' versions too (a registered framework's)."""
    for name in packages:
        if name not in _FRAMEWORK_PACKAGES and name not in PACKAGES:
            _FRAMEWORK_PACKAGES.append(name)


def versions() -> dict[str, str]:
    out = {}
    for name in (PACKAGES[0], *_FRAMEWORK_PACKAGES, *PACKAGES[1:]):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


NOT_INSTALLED = "not installed here"  # the words of every reason a machine lacks a package


def not_installed_reason(name: str, missing, hint: str = "") -> str:
    """The ``unsupported`` reason of a cell whose framework or model package is
    missing here ("tensorflow: not installed here (no module tensorflow)"), or
    "" when nothing is missing: one wording, which the doctor, the report's
    first page and the claims (:func:`lacks_package`) read back."""
    if not missing:
        return ""
    return f"{name}: {NOT_INSTALLED} (no module {', '.join(missing)}{'; ' + hint if hint else ''})"


def lacks_package(reason) -> bool:
    """Whether a cell's error is this machine's missing package
    (:func:`not_installed_reason`), not something the cell itself did."""
    return isinstance(reason, str) and f": {NOT_INSTALLED} (no module " in reason


def missing_modules(modules) -> list[str]:
    """Those of ``modules`` this interpreter cannot import, found without
    importing them (``importlib.util.find_spec``): what ``frameworks.not_installed``
    and ``models.not_installed`` say a machine lacks."""
    import importlib.util

    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or a broken one
            found = False
        if not found:
            missing.append(module)
    return missing


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The CPU's instruction-set extensions that decide which kernels the frameworks
# run (oneDNN, XLA:CPU, Eigen): with AMX or AVX512-BF16 a bfloat16 matmul runs
# in hardware, without them it is emulated, and mixed-precision verdicts turn
# over. Keys are Linux's /proc/cpuinfo flag names.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx_vnni", "avx512_vnni",
             "amx_bf16", "amx_int8", "amx_tile")


def cpu_flags(cpuinfo: str | None = None) -> dict[str, bool]:
    """Whether the CPU has each of :data:`ISA_FLAGS` (the first processor's
    ``flags`` line of /proc/cpuinfo, or of ``cpuinfo``); empty where the
    flags cannot be read (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    line = next((ln for ln in cpuinfo.splitlines()
                 if ln.split(":", 1)[0].strip() in ("flags", "Features")), None)
    if line is None:
        return {}
    have = set(line.split(":", 1)[1].split())
    return {flag: flag in have for flag in ISA_FLAGS}


def cpu_freq_mhz() -> dict[str, float]:
    """The CPU's highest clock in MHz where the OS tells it (psutil), a setting
    of the machine; empty where it does not (a virtual machine often does
    not). The clock of the moment is left out: it differs between any two
    readings."""
    try:
        f = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):
        f = None
    return {"max": round(float(f.max), 1)} if f is not None and f.max else {}


@contextlib.contextmanager
def _nvml_session():
    """pynvml, initialised for the block and shut down after it; None without
    nvidia-ml-py or a driver. An NVML error inside the block is the caller's."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield None
        return
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def gpus() -> list[dict]:
    """Each NVIDIA GPU as NVML tells it (nvidia-ml-py): name, memory, driver,
    the highest SM and memory clocks, the application clocks it is set to and
    its power limit, each where the driver answers; empty without NVML or a
    GPU. Only settings, never the clocks of the moment: two runs on one
    machine record the same."""
    with _nvml_session() as pynvml:
        if pynvml is None:
            return []
        try:
            driver = _nvml(pynvml.nvmlSystemGetDriverVersion)
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = _nvml(pynvml.nvmlDeviceGetMemoryInfo, h)
                power = _nvml(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)  # the limit in force
                g = {"name": _nvml(pynvml.nvmlDeviceGetName, h),
                     "memory_total_bytes": int(mem.total) if mem is not None else None,
                     "driver": driver,
                     "sm_clock_max_mhz": _nvml(pynvml.nvmlDeviceGetMaxClockInfo, h,
                                               pynvml.NVML_CLOCK_SM),
                     "mem_clock_max_mhz": _nvml(pynvml.nvmlDeviceGetMaxClockInfo, h,
                                                pynvml.NVML_CLOCK_MEM),
                     "sm_clock_app_mhz": _nvml(pynvml.nvmlDeviceGetApplicationsClock, h,
                                               pynvml.NVML_CLOCK_SM),
                     "mem_clock_app_mhz": _nvml(pynvml.nvmlDeviceGetApplicationsClock, h,
                                                pynvml.NVML_CLOCK_MEM),
                     "power_limit_w": power / 1000 if power is not None else None}
                out.append({k: v.decode() if isinstance(v, bytes) else v for k, v in g.items()})
            return out
        except pynvml.NVMLError:
            return []


def gpu_free_bytes() -> int | None:
    """Free memory of the GPU the workers use (the first of
    ``CUDA_VISIBLE_DEVICES`` where it names one by index, else GPU 0), as NVML
    tells it; None without NVML, a GPU or an answer."""
    from .energy import device_index

    with _nvml_session() as pynvml:
        if pynvml is None:
            return None
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index())
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
        except pynvml.NVMLError:
            return None


def _nvml(fn, *args):
    """``fn(*args)``, or None where this GPU or driver does not support it."""
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def describe_gpus(found: list[dict] | None = None) -> str:
    """One line per GPU NVML sees (name, memory, driver, power limit), or why none."""
    found = gpus() if found is None else found
    if not found:
        try:
            import pynvml  # noqa: F401
        except ImportError:
            return "no NVML (nvidia-ml-py not installed)"
        return "no NVIDIA GPU (NVML found no driver or no device)"
    return "; ".join(
        f"{g['name']}, {(g.get('memory_total_bytes') or 0) / 2**30:.0f} GiB, driver "
        f"{g.get('driver')}" + (f", power limit {g['power_limit_w']:.0f} W"
                                if g.get("power_limit_w") else "") for g in found)


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


# Params that change no measurement: a report's time for extra rounds (changing it
# must not archive a study's results as other params would).
UNHASHED = ("more_rounds_s",)


def params_hash(params) -> str:
    """12 hex digits of a study's params (a mapping, or its typed params), but
    for UNHASHED."""
    blob = json.dumps({k: v for k, v in dict(params).items() if k not in UNHASHED},
                      sort_keys=True, default=str)
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
        "cpu_flags": cpu_flags(),
        "cpu_freq_mhz": cpu_freq_mhz(),
        "memory_total_bytes": vm.total,
        "gpus": gpu_list,
        "versions": versions(),
        **git_info(),
    }
    if params is not None:
        m["params_hash"] = params_hash(params)
        m["threads"] = params["threads"]
    return m
