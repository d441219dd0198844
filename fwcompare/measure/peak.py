"""What the machine can do: the ceilings a cell's speed is a share of.

A roofline has two ceilings: dense matmul FLOP/s (per precision) and memory
bandwidth. Both are measured here the way a roofline does, with each
framework's own kernels (``make_peak_kernels`` of each backend): an n x n
matmul (2 n^3 FLOPs a call) and an elementwise add over a float32 array far
larger than the caches (one read and one write of it a call). Each framework
runs in a worker process of its own (a PEAK job, forked like a cell's
worker), pinned to the run's cores with its threads set as a cell's are; the machine's ceiling for a precision is the best
rate any framework's matmul reached (so every framework is measured against
the same ceiling), and the bandwidth is the best add.

A cell's ``pct_of_peak`` is 100 x its achieved FLOP/s (its FLOP estimate over
its median time) / the ceiling of its precision on its device. The figures
are kept per machine in ``.cache/peak/`` (keyed by host, CPU, GPUs, framework
version, cores and device), so a report measures them once; each run's
``env.json`` records the ceilings it used, with how they were measured and,
on known GPUs, the vendor's datasheet figures beside them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..core.paths import CACHE as CACHE_ROOT
from ..frameworks import FRAMEWORKS

CACHE = CACHE_ROOT / "peak"
# n of the n x n matmul: 2.1 GFLOP a call on a CPU in float32, 0.27 GFLOP in the
# precisions a CPU may only emulate (bfloat16 and float16 without AMX or
# AVX512-FP16 run tens of times slower), 1100 GFLOP on a GPU.
MATMUL_N = {("cpu", "float32"): 1024, "cpu": 512, "gpu": 8192}


def matmul_n(device: str, dtype: str) -> int:
    return MATMUL_N.get((device, dtype), MATMUL_N[device])
STREAM_ELEMENTS = {"cpu": 2 ** 26, "gpu": 2 ** 28}  # 256 MiB and 1 GiB of float32
MIN_S = 0.3  # each rate: calls until this long (at least MIN_CALLS), after a warm-up call
MIN_CALLS = 3

# Dense (no sparsity) figures from NVIDIA's datasheets, FLOP/s and bytes/s.
DATASHEET = {
    "H100 80GB HBM3": {"float32": 67e12, "tf32": 494.7e12, "bfloat16": 989.4e12,
                       "float16": 989.4e12, "bandwidth": 3.35e12,
                       "source": "NVIDIA H100 SXM datasheet"},
    "H100 PCIe": {"float32": 51e12, "tf32": 378e12, "bfloat16": 756e12, "float16": 756e12,
                  "bandwidth": 2.0e12, "source": "NVIDIA H100 PCIe datasheet"},
    "H200": {"float32": 67e12, "tf32": 494.7e12, "bfloat16": 989.4e12, "float16": 989.4e12,
             "bandwidth": 4.8e12, "source": "NVIDIA H200 SXM datasheet"},
    "A100-SXM4-80GB": {"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12,
                       "float16": 312e12, "bandwidth": 2.039e12,
                       "source": "NVIDIA A100 80GB SXM datasheet"},
}


def _rate(fn, sync) -> float:
    """Fewest seconds of one call of ``fn`` (synced), after one warm-up call:
    a ceiling is the best the machine did."""
    sync(fn())
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < MIN_CALLS or time.perf_counter() - start < MIN_S:
        t0 = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def probe(backend, framework: str, device: str, dtypes: list[str], threads: int) -> dict:
    """In this process (a worker's, pinned to its cores): one framework's
    matmul rate per precision and its add's bandwidth, through its backend
    (a precision it cannot run is left out with the reason)."""
    from ..frameworks import check_precision

    backend.configure(threads, device)
    elements = STREAM_ELEMENTS[device]
    out: dict = {"framework": framework, "device": device, "threads": threads,
                 "matmul_n": {}, "stream_bytes": 4 * elements, "flops_per_s": {},
                 "skipped": {}}
    for dtype in dtypes:
        n = out["matmul_n"][dtype] = matmul_n(device, dtype)
        try:
            check_precision(dtype, device)
            backend.set_precision(dtype, device)
            mm, add = backend.make_peak_kernels(n, elements, dtype, device)
            out["flops_per_s"][dtype] = 2.0 * n ** 3 / _rate(mm, backend.sync)
            if dtype == "float32":
                out["bandwidth_bytes_per_s"] = 2.0 * 4 * elements / _rate(add, backend.sync)
        except Exception as exc:  # recorded, never fatal: a ceiling from the others
            out["skipped"][dtype] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def probe_file(job) -> Path:
    """Where a PEAK job's worker leaves its figures."""
    return Path(job.store_dir) / "work" / f"peak-{job.framework}.json"


def _cache_path(framework: str, device: str, threads: int, manifest: dict) -> Path:
    gpus = [g.get("name", "") for g in manifest.get("gpus") or []]
    text = json.dumps([manifest.get("hostname"), manifest.get("cpu_model"), gpus,
                       (manifest.get("versions") or {}).get(framework), device, threads])
    return CACHE / f"{framework}-{device}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"


def kept(framework: str, device: str, threads: int, manifest: dict) -> dict | None:
    """This machine's figures for a framework, if any were kept."""
    path = _cache_path(framework, device, threads, manifest)
    return json.loads(path.read_text()) if path.is_file() else None


def missing(framework: str, device: str, dtypes, threads: int, manifest: dict) -> list[str]:
    """The precisions of ``dtypes`` (and float32, which gives the bandwidth too)
    that this machine's kept figures for a framework do not cover."""
    found = kept(framework, device, threads, manifest) or {"flops_per_s": {}, "skipped": {}}
    return [d for d in dict.fromkeys(["float32", *dtypes])
            if d not in found["flops_per_s"] and d not in found["skipped"]]


def store(found: dict, manifest: dict) -> dict:
    """Keep a probe's figures for this machine, beside those kept before: a
    precision measured once keeps its figure (a report's studies all see the
    same ceilings); returns what is kept."""
    path = _cache_path(found["framework"], found["device"], found["threads"], manifest)
    old = json.loads(path.read_text()) if path.is_file() else {}
    merged = dict(found, **{k: old[k] for k in ("bandwidth_bytes_per_s", "stream_bytes")
                            if k in old})
    found = dict(found, measured={d: time.strftime("%Y-%m-%dT%H:%M:%S")
                                  for d in (*found["flops_per_s"], *found["skipped"])})
    for key in ("flops_per_s", "skipped", "matmul_n", "measured"):
        merged[key] = {**found[key], **old.get(key, {})}
    found = merged
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(found, indent=1))
    os.replace(tmp, path)
    return found


def ceilings(device: str, dtypes, threads: int, manifest: dict,
             frameworks=FRAMEWORKS) -> dict:
    """The machine's ceilings on ``device`` from every framework's figures kept
    for it (the best matmul per precision, the best bandwidth) and the
    datasheet's where the GPU is known."""
    per = {fw: f for fw in dict.fromkeys(frameworks)
           if (f := kept(fw, device, threads, manifest)) is not None}
    best: dict[str, float] = {}
    for fig in per.values():
        for dtype, rate in fig.get("flops_per_s", {}).items():
            best[dtype] = max(best.get(dtype, 0.0), rate)
    bandwidth = max((f.get("bandwidth_bytes_per_s", 0.0) for f in per.values()), default=0.0)
    gpus = [g.get("name", "") for g in manifest.get("gpus") or []]
    sheet = next((v for k, v in DATASHEET.items() if device == "gpu" and gpus
                  and k in gpus[0]), None)
    return {"device": device, "threads": threads, "flops_per_s": best,
            "bandwidth_bytes_per_s": bandwidth or None, "datasheet": sheet,
            "frameworks": per,
            "missing": sorted(set(dtypes) - set(best)),
            "method": (f"best of each framework's own n x n matmul per precision (n "
                       f"{matmul_n(device, 'float32')} in float32, {matmul_n(device, 'x')} "
                       f"in the others; 2 n^3 FLOPs, fastest of the calls over "
                       f"{MIN_S:g} s after a warm-up) and of its add over "
                       f"{4 * STREAM_ELEMENTS[device] // 2 ** 20} MiB of float32 (a read and "
                       f"a write per element), each framework in a worker process on "
                       f"{threads} cores")}


# The time breakdown's phase of the probes.
PHASE = "hardware peak (matmul, bandwidth)"


def measure(runner, model: str, dtypes: list[str]) -> None:
    """The machine's ceilings into a run's manifest (``env.json``): each of the
    run's frameworks probed once per machine in a worker of its own, started
    by ``runner`` (a ``fwcompare.execution.runner.Runner``) as a cell's worker is
    (forked, pinned, its threads set); the figures of every framework kept for
    this machine make the ceilings."""
    from ..core.atomic import write_json
    from ..plan.job import PEAK

    device, threads = runner.params["device"], runner.threads
    todo = {fw: need for fw in runner.params["frameworks"] if fw not in runner.not_installed
            and (need := missing(fw, device, dtypes, threads, runner.manifest))}
    if todo:  # every server's imports done first: nothing else on the cores
        with runner.phase("process start and imports"):
            for kind in [*todo, "prepare"]:
                runner.server_for(runner.worker_env(runner.env_threads, kind))
    for fw in todo:
        job = runner.job(PEAK, model, fw).replace(peak_dtypes=tuple(todo[fw]))
        runner.bar.set_postfix_str(f"measuring the machine's peak with {fw}", refresh=True)
        w = runner.spawn_worker(job, f"peak-{fw}")
        try:
            with runner.phase(PHASE):
                w.proc.wait(timeout=runner.params["group_timeout_s"])
        except subprocess.TimeoutExpired:
            pass
        finally:
            w.kill()
        found = probe_file(job)
        if found.is_file():
            store(json.loads(found.read_text()), runner.manifest)
        else:
            runner.say(f"{fw}: the peak probe left no figures ({w.exit_description()}): "
                       f"{w.stderr_tail()}")
    runner.manifest["peak"] = ceilings(device, dtypes, threads, runner.manifest,
                                       [*FRAMEWORKS, *runner.params["frameworks"]])
    write_json(runner.store.dir / "env.json", runner.manifest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fwcompare.measure.peak",
                                 description="one framework's matmul and bandwidth probes, "
                                             "printed (nothing kept)")
    ap.add_argument("--framework", required=True, choices=list(FRAMEWORKS))
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    from ..core.env import default_threads
    from ..frameworks import get_backend
    from ..frameworks import worker_env
    from ..core.machine_load import pin_threads

    threads = args.threads or default_threads()
    os.environ.update(worker_env(threads, args.device, args.framework))
    pin_threads(threads)
    print(json.dumps(probe(get_backend(args.framework), args.framework, args.device,
                           args.dtypes.split(","), threads), indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
