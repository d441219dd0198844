"""``fwcompare doctor``: can this machine run what a study asks, before hours
go into it?

For each selected framework, in a fresh interpreter of its own (as a worker
would be: one framework per process, its environment variables read at
import), and through the same backend calls the measurements use
(``fwcompare.frameworks``), the doctor checks:

- **import**: the framework imports and takes its thread setting;
- **device**: it places a tensor on the device and reads it back (on a GPU:
  the framework sees one, e.g. ``torch.cuda.is_available()``);
- **tf32** (GPU): TF32 can be switched on for the ``tf32`` precision and off
  again for float32, as ``set_precision`` does;
- **memory**: the memory figure responds to a 64 MiB allocation (GPU: the
  framework's allocator peak; CPU: the process's peak RSS, ``memory.PeakRSS``).

A framework that is not installed at all (``frameworks.not_installed``: no
module it requires) is said once ("tensorflow: not installed here") and not
probed; it fails nothing: its cells are ``unsupported`` with that reason and
the rest runs. A ``device: gpu`` run calls :func:`require` first and stops
with the doctor's findings where an installed framework cannot use the GPU,
instead of producing a grid of ``unsupported`` cells.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core import env
from ..plan.schema import ParamsError
from ..frameworks import FRAMEWORKS

ALLOC_BYTES = 64 * 2 ** 20  # what the memory check allocates


class DoctorError(ParamsError):
    """A selected framework cannot run on the requested device; the message says why."""


def _check(results: list, name: str, fn) -> bool:
    try:
        detail = fn()
        results.append({"check": name, "ok": True, "detail": detail or ""})
        return True
    except Exception as exc:  # a finding, not a crash: the doctor reports it
        results.append({"check": name, "ok": False,
                        "detail": f"{type(exc).__name__}: {exc}".strip()[:400]})
        return False


def probe(framework: str, device: str) -> list[dict]:
    """The checks of one framework on one device, in this process."""
    from ..frameworks import get, get_backend

    # The framework's own probe settings (JAX's platforms), before its import.
    os.environ.update(get(framework).probe_env.get(device, {}))
    results: list[dict] = []
    backend = None

    def imported():
        nonlocal backend
        backend = get_backend(framework)
        backend.configure(1, device)
        return f"{framework} imported"
    if not _check(results, "import", imported):
        return results

    def placed():
        x = backend.make_inputs(np.arange(16, dtype=np.int64).reshape(2, 8), device)
        backend.sync(x)
        back = backend.to_numpy(x["input_ids"] if isinstance(x, dict) else x)
        if not np.array_equal(np.asarray(back).reshape(2, 8), np.arange(16).reshape(2, 8)):
            raise RuntimeError("a tensor placed on the device came back changed")
        info = backend.runtime_info(device)
        if device == "gpu" and str(info.get("device_name", "cpu")).lower() == "cpu":
            raise RuntimeError("the tensor landed on the CPU, not a GPU")
        return f"{info.get('framework_version', '')} on {info.get('device_name', device)}"
    if not _check(results, "device", placed):
        return results

    if device == "gpu":
        def tf32():
            seen = {}
            for dtype in ("tf32", "float32"):
                backend.set_precision(dtype, device)
                seen[dtype] = backend.tf32_enabled(device)
            if seen != {"tf32": True, "float32": False}:
                raise RuntimeError(f"TF32 did not follow the precision: {seen}")
            return "on for tf32, off for float32"
        _check(results, "tf32", tf32)

    def memory():
        # int64 ids of 64 MiB; a framework may narrow them to int32: half of it.
        shape = (ALLOC_BYTES // 8 // 1024, 1024)
        if device == "gpu":
            held = []

            def allocate():  # kept alive until the peak is read
                held.append(backend.make_inputs(np.ones(shape, dtype=np.int64), device))
                backend.sync(held[0])
            seen = backend.gpu_memory(allocate)
            peak = seen["peak_mem_bytes"]
            if peak is None or peak < ALLOC_BYTES // 2:
                raise RuntimeError(f"allocator peak {peak} after a {ALLOC_BYTES} B allocation "
                                   f"({seen['mem_method']})")
            return (f"allocator peak {peak / 2 ** 20:.0f} MiB after a 64 MiB allocation "
                    f"({seen['mem_method']})")
        from ..core.memory import PeakRSS, current_rss_bytes

        base = current_rss_bytes()
        with PeakRSS() as peak:
            x = backend.make_inputs(np.ones(shape, dtype=np.int64), device)
            backend.sync(x)
        rise = peak.peak_bytes - base
        if rise < ALLOC_BYTES // 2:
            raise RuntimeError(f"peak RSS rose by {rise} B over a {ALLOC_BYTES} B allocation")
        return f"peak RSS rose {rise / 2 ** 20:.0f} MiB over a 64 MiB allocation ({peak.method})"
    _check(results, "memory", memory)
    return results


def examine(frameworks: list[str], device: str, timeout_s: float = 300.0) -> dict[str, list]:
    """Every framework probed in a fresh interpreter of its own, two at a time;
    one that is not installed in one finding, ``missing``, unprobed."""
    from ..frameworks import not_installed

    def one(fw: str) -> list[dict]:
        if why := not_installed(fw):
            return [{"check": "import", "ok": False, "missing": True,
                     "detail": f"{why}: its cells are unsupported, the others run"}]
        try:
            out = subprocess.run([sys.executable, "-m", "fwcompare.suite.doctor", "--probe", fw,
                                  "--device", device], capture_output=True, text=True,
                                 timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return [{"check": "import", "ok": False,
                     "detail": f"the probe did not finish in {timeout_s:g} s"}]
        for line in reversed(out.stdout.splitlines()):
            if line.startswith("["):
                return json.loads(line)
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return [{"check": "import", "ok": False,
                 "detail": f"the probe exited with code {out.returncode}: {tail[:300]}"}]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(frameworks, pool.map(one, frameworks)))


def passed(found: dict[str, list]) -> bool:
    """Every installed framework passed every check (one not installed
    fails nothing: its cells are unsupported)."""
    return all(c["ok"] or c.get("missing") for checks in found.values() for c in checks)


def format_findings(device: str, found: dict[str, list]) -> str:
    lines = [f"device {device}" + (f": {env.describe_gpus()}" if device == "gpu" else "")]
    for fw, checks in found.items():
        for c in checks:
            mark = "ok  " if c["ok"] else "--  " if c.get("missing") else "FAIL"
            lines.append(f"  {fw:<11} {c['check']:<7} {mark} {c['detail']}")
    return "\n".join(lines)


# "device:framework" pairs that passed in this process or a parent (a report
# checks every study's before the first; their notebook kernels inherit it).
PASSED_VAR = "FWCOMPARE_DOCTOR_PASSED"


def require(frameworks: list[str], device: str) -> None:
    """Raise :class:`DoctorError` unless every framework passes on ``device``."""
    done = set(filter(None, os.environ.get(PASSED_VAR, "").split(",")))
    todo = [fw for fw in dict.fromkeys(frameworks) if f"{device}:{fw}" not in done]
    if not todo:
        return
    found = examine(todo, device)
    if not passed(found):
        bad = sorted(fw for fw, checks in found.items()
                     if not all(c["ok"] or c.get("missing") for c in checks))
        raise DoctorError(f"device {device}: {', '.join(bad)} cannot run here "
                          f"(fwcompare doctor):\n" + format_findings(device, found))
    os.environ[PASSED_VAR] = ",".join(sorted(done | {f"{device}:{fw}" for fw in todo}))


def dry_run_note(device: str) -> str:
    """What a dry run of a ``device: gpu`` run says on a machine without a GPU
    (NVML finds none), where the real run would stop at :func:`require`; ""
    otherwise."""
    if device != "gpu" or env.gpus():
        return ""
    return ("this machine has no NVIDIA GPU: the real run would stop at the doctor "
            "(`fwcompare doctor --device gpu`) before measuring")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fwcompare doctor", description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "gpu", "all"], default="all",
                    help="all (default): the CPU, then the GPU if there is one to look for")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                    help="comma-separated (default: all three)")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:  # the child: one framework, one device, JSON on the last line
        print(json.dumps(probe(args.probe, args.device)), flush=True)
        return 0
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown:
        print(f"unknown framework(s) {unknown}; known: {', '.join(FRAMEWORKS)}",
              file=sys.stderr)
        return 2
    devices = ["cpu", "gpu"] if args.device == "all" else [args.device]
    ok = True
    for device in devices:
        found = examine(frameworks, device)
        print(format_findings(device, found), flush=True)
        if device == "gpu" and not passed(found):
            print("no GPU a study can use: device: gpu runs stop before measuring "
                  "(CPU profiles are unaffected)" if args.device == "all" else
                  "device gpu: not usable here", flush=True)
        ok = ok and (passed(found) or (args.device == "all" and device == "gpu"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
