#!/usr/bin/env python3
"""Between-process spread probe for PyTorch eager BERT inference latency.

What it measures
----------------
bert-base-cased shaped ``BertModel(BertConfig())`` (vocab 28996, random
weights from ``torch.manual_seed(0)``; nothing is downloaded), batch 1 x 128
tokens, forward under ``torch.inference_mode()``.  Each *fresh* Python
process builds the model, warms up and times ``--iters`` forwards:

* wall time per call: ``time.perf_counter_ns`` around
  ``model(ids); torch.cuda.synchronize()`` (host + device);
* GPU time per call: a pair of ``torch.cuda.Event(enable_timing=True)``
  around the forward (device side only).

Comparing the spread of process medians of the two tells a host-bound cause
(wall moves, GPU event time stays) from a device-bound one.  Each child also
reports the CPUs it ran on (``psutil.Process().cpu_num()`` sampled every 20
calls: distinct cores and migrations), the /proc/cpuinfo MHz of that core,
GPU SM/mem clock, pstate, power and throttle reasons before and after timing
(pynvml), ``torch.get_num_threads()``, load average and GPU process count.

Conditions (one fresh process each, order rotated every round):

* ``free``   as is (baseline);
* ``pin``    ``os.sched_setaffinity(0, {core})`` before importing torch;
* ``pin1t``  pinned + ``torch.set_num_threads(1)`` + ``OMP_NUM_THREADS=1``;
* ``settle`` pinned + 1 thread + warm-up of ~1.5 s of calls, then until the
  last 3 blocks of 20 calls have medians within 1 % (cap 5 s);
* ``graph``  pinned + 1 thread + forward captured in a ``torch.cuda.CUDAGraph``
  (static input) and replayed: what is left once launches are gone.

How to run
----------
GPU (default)::

    cd benchmarks/gpu
    PYTHONUNBUFFERED=1 python3 launch_probe.py --rounds 5 --out launch_probe.csv

CPU smoke test (events/NVML skipped, ``graph`` reported as skipped)::

    python3 benchmarks/gpu/launch_probe.py --device cpu --tiny --rounds 2 \
        --iters 20 --out /tmp/probe.csv

Output
------
The per-process table: one CSV row per child process (written after every
child, so a cut-off run keeps what it saw), progress lines while it runs,
then the per-process table and a per-condition summary (n processes, median
of process medians, min, max, max/min spread; wall and GPU-event time).
Depends only on the stdlib, torch and transformers; psutil and pynvml are
used when importable.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time

CONDITIONS = ["free", "pin", "pin1t", "settle", "graph"]
PINNED = {"pin", "pin1t", "settle", "graph"}
ONE_THREAD = {"pin1t", "settle", "graph"}
MARK = "LAUNCH_PROBE_JSON "


# --------------------------------------------------------------------------
# small helpers (used by both modes; no torch import here)
# --------------------------------------------------------------------------
def _quantile(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _cpu_mhz(core):
    """Current MHz of one core: cpufreq if present, else /proc/cpuinfo."""
    if core is None:
        return None
    try:
        with open(f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq") as f:
            return int(f.read().strip()) / 1000.0
    except Exception:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
        for block in txt.split("\n\n"):
            d = {}
            for line in block.splitlines():
                if ":" in line:
                    k, v = line.split(":", 1)
                    d[k.strip()] = v.strip()
            if d.get("processor") == str(core) and "cpu MHz" in d:
                return float(d["cpu MHz"])
    except Exception:
        pass
    return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except Exception:
        pass
    return platform.processor() or platform.machine()


def _current_cpu():
    try:
        import psutil  # noqa: WPS433

        return psutil.Process().cpu_num()
    except Exception:
        pass
    try:  # field 39 of /proc/self/stat is the last CPU
        with open("/proc/self/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[36])
    except Exception:
        return None


class _Nvml:
    """Thin optional wrapper around pynvml; every call degrades to None."""

    def __init__(self, index=0):
        self.ok = False
        try:
            import pynvml  # noqa: WPS433

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.ok = True
        except Exception:
            self.ok = False

    def _get(self, fn, *a):
        if not self.ok:
            return None
        try:
            return fn(*a)
        except Exception:
            return None

    def snapshot(self):
        if not self.ok:
            return {}
        nv, h = self.nv, self.h
        pw = self._get(nv.nvmlDeviceGetPowerUsage, h)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        procs = self._get(nv.nvmlDeviceGetComputeRunningProcesses, h)
        return {
            "sm_mhz": self._get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "mem_mhz": self._get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            "pstate": self._get(nv.nvmlDeviceGetPerformanceState, h),
            "power_w": None if pw is None else pw / 1000.0,
            "temp_c": self._get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "reasons": self._get(reasons_fn, h) if reasons_fn else None,
            "gpu_procs": None if procs is None else len(procs),
        }

    def header(self):
        if not self.ok:
            return {}
        nv, h = self.nv, self.h

        def s(x):
            return x.decode() if isinstance(x, bytes) else x

        pl = self._get(nv.nvmlDeviceGetPowerManagementLimit, h)
        return {
            "gpu": s(self._get(nv.nvmlDeviceGetName, h)),
            "driver": s(self._get(nv.nvmlSystemGetDriverVersion)),
            "sm_max_mhz": self._get(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            "mem_max_mhz": self._get(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
            "app_sm_mhz": self._get(nv.nvmlDeviceGetApplicationsClock, h, nv.NVML_CLOCK_SM),
            "power_limit_w": None if pl is None else pl / 1000.0,
            "persistence": self._get(nv.nvmlDeviceGetPersistenceMode, h),
            **self.snapshot(),
        }


# --------------------------------------------------------------------------
# child
# --------------------------------------------------------------------------
def child(args):
    t_start = time.perf_counter()
    cond = args.cond
    res = {"cond": cond, "round": args.round, "pid": os.getpid(), "ok": False}
    if cond in PINNED and args.core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})  # before torch is imported
    try:
        res["affinity"] = len(os.sched_getaffinity(0))
    except Exception:
        res["affinity"] = None
    try:
        res["loadavg1"] = os.getloadavg()[0]
    except Exception:
        res["loadavg1"] = None

    t0 = time.perf_counter()
    import torch  # noqa: WPS433
    from transformers import BertConfig, BertModel  # noqa: WPS433

    res["import_s"] = time.perf_counter() - t0
    if cond in ONE_THREAD:
        torch.set_num_threads(1)
    res["threads"] = torch.get_num_threads()
    res["interop_threads"] = torch.get_num_interop_threads()

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    nvml = _Nvml() if cuda else None

    t0 = time.perf_counter()
    torch.manual_seed(0)
    if args.tiny:
        cfg = BertConfig(vocab_size=28996, hidden_size=128, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=512)
    else:
        cfg = BertConfig(vocab_size=28996)  # bert-base-cased shape
    model = BertModel(cfg).eval().to(dev)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, args.seq), generator=g).to(dev)
    if cuda:
        torch.cuda.synchronize()
    res["build_s"] = time.perf_counter() - t0

    def sync():
        if cuda:
            torch.cuda.synchronize()

    fwd = lambda: model(ids)  # noqa: E731
    samples_cpu = []

    def sample_cpu():
        c = _current_cpu()
        if c is not None:
            samples_cpu.append(c)

    with torch.inference_mode():
        # first (cold) call
        t0 = time.perf_counter_ns()
        fwd()
        sync()
        res["first_call_ms"] = (time.perf_counter_ns() - t0) / 1e6

        if cond == "graph":
            if not cuda:
                res["graph"] = "skipped (cpu)"
                res["ok"] = True
                res["skipped"] = True
                res["child_s"] = time.perf_counter() - t_start
                print(MARK + json.dumps(res), flush=True)
                return
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        model(ids)
                torch.cuda.current_stream().wait_stream(s)
                cg = torch.cuda.CUDAGraph()
                with torch.cuda.graph(cg):
                    static_out = model(ids)  # noqa: F841
                sync()
                fwd = cg.replay
                res["graph"] = "captured"
            except Exception as e:  # report and carry on
                res["graph"] = f"capture failed: {type(e).__name__}: {e}"[:300]
                res["child_s"] = time.perf_counter() - t_start
                print(MARK + json.dumps(res), flush=True)
                return

        # warm-up
        t0 = time.perf_counter()
        if cond == "settle":
            blk, meds = [], []
            n = 0
            while True:
                a = time.perf_counter_ns()
                fwd()
                sync()
                blk.append(time.perf_counter_ns() - a)
                n += 1
                if len(blk) == 20:
                    meds.append(statistics.median(blk))
                    blk = []
                el = time.perf_counter() - t0
                if el >= 5.0:
                    res["settled"] = False
                    break
                if el >= 1.5 and len(meds) >= 3:
                    last = meds[-3:]
                    if max(last) / min(last) <= 1.01:
                        res["settled"] = True
                        break
            res["warmup_calls"] = n
        else:
            for _ in range(args.warmup):
                fwd()
            sync()
            res["warmup_calls"] = args.warmup
        res["warmup_s"] = time.perf_counter() - t0

        res["nvml_before"] = nvml.snapshot() if nvml else {}
        sample_cpu()
        res["cpu_mhz_before"] = _cpu_mhz(samples_cpu[-1] if samples_cpu else None)

        wall, gpu = [], []
        if cuda:
            ev0 = torch.cuda.Event(enable_timing=True)
            ev1 = torch.cuda.Event(enable_timing=True)
        for i in range(args.iters):
            if i % 20 == 0:
                sample_cpu()
            a = time.perf_counter_ns()
            if cuda:
                ev0.record()
                fwd()
                ev1.record()
                torch.cuda.synchronize()
            else:
                fwd()
            b = time.perf_counter_ns()
            wall.append((b - a) / 1e6)
            if cuda:
                gpu.append(ev0.elapsed_time(ev1))
        sample_cpu()
        res["nvml_after"] = nvml.snapshot() if nvml else {}
        res["cpu_mhz_after"] = _cpu_mhz(samples_cpu[-1] if samples_cpu else None)

    for name, xs in (("wall", wall), ("gpu", gpu)):
        res[f"{name}_med"] = statistics.median(xs) if xs else None
        res[f"{name}_p10"] = _quantile(xs, 0.10)
        res[f"{name}_p90"] = _quantile(xs, 0.90)
    # drift inside the process: medians of 4 equal blocks
    k = max(1, len(wall) // 4)
    res["wall_blocks"] = [round(statistics.median(wall[j:j + k]), 4)
                          for j in range(0, len(wall) - k + 1, k)][:4]
    res["cpus"] = sorted(set(samples_cpu))
    res["n_cpus"] = len(set(samples_cpu))
    res["migrations"] = sum(1 for x, y in zip(samples_cpu, samples_cpu[1:]) if x != y)
    res["cpu_samples"] = len(samples_cpu)
    res["ok"] = True
    res["child_s"] = time.perf_counter() - t_start
    print(MARK + json.dumps(res), flush=True)


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------
FIELDS = [
    "round", "cond", "ok", "error", "pid", "child_s", "import_s", "build_s", "first_call_ms",
    "warmup_calls", "warmup_s", "settled", "graph",
    "wall_med", "wall_p10", "wall_p90", "gpu_med", "gpu_p10", "gpu_p90", "wall_blocks",
    "threads", "interop_threads", "affinity", "cpus", "n_cpus", "migrations", "cpu_samples",
    "cpu_mhz_before", "cpu_mhz_after", "loadavg1",
    "sm_mhz_before", "sm_mhz_after", "mem_mhz_before", "mem_mhz_after",
    "pstate_before", "pstate_after", "power_w_before", "power_w_after",
    "temp_c_after", "reasons_before", "reasons_after", "gpu_procs_before",
]


def _flatten(r):
    row = dict(r)
    for when in ("before", "after"):
        snap = row.pop(f"nvml_{when}", None) or {}
        for k, v in snap.items():
            row[f"{k}_{when}"] = v
    for k in ("cpus", "wall_blocks"):
        if isinstance(row.get(k), list):
            row[k] = " ".join(str(x) for x in row[k])
    return row


def _header(device):
    lines = []
    if device == "cuda":
        h = _Nvml().header()
        if h:
            lines.append(
                f"GPU: {h.get('gpu')} | driver {h.get('driver')} | SM {h.get('sm_mhz')}/{h.get('sm_max_mhz')} MHz"
                f" (app {h.get('app_sm_mhz')}) | mem {h.get('mem_mhz')}/{h.get('mem_max_mhz')} MHz"
                f" | P{h.get('pstate')} | power {h.get('power_w')}/{h.get('power_limit_w')} W"
                f" | {h.get('temp_c')} C | persistence {h.get('persistence')} | reasons {h.get('reasons')}"
                f" | gpu procs {h.get('gpu_procs')}"
            )
        else:
            lines.append("GPU: pynvml unavailable")
    try:
        aff = len(os.sched_getaffinity(0))
    except Exception:
        aff = None
    lines.append(f"CPU: {_cpu_model()} | nproc {os.cpu_count()} (affinity {aff}) | loadavg {os.getloadavg()}"
                 f" | governor {_read('/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor')}")
    try:
        vers = subprocess.run(
            [sys.executable, "-c",
             "import torch,transformers,sys;print(sys.version.split()[0],torch.__version__,"
             "torch.version.cuda,transformers.__version__)"],
            capture_output=True, text=True, timeout=120).stdout.split()
        lines.append(f"python {vers[0]} | torch {vers[1]} (cuda {vers[2]}) | transformers {vers[3]}")
    except Exception as e:
        lines.append(f"versions: unavailable ({e})")
    return lines


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except Exception:
        return None


def _pearson(xs, ys):
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(pts) < 3:
        return None
    xs, ys = zip(*pts)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = sum((x - mx) ** 2 for x in xs) ** 0.5
    sy = sum((y - my) ** 2 for y in ys) ** 0.5
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def _f(x, nd=3):
    if x is None or x == "":
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def driver(args):
    conds = [c.strip() for c in args.conditions.split(",") if c.strip()]
    for c in conds:
        if c not in CONDITIONS:
            sys.exit(f"unknown condition {c!r}; known: {CONDITIONS}")
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except Exception:
        allowed = list(range(os.cpu_count() or 1))
    core = args.core if args.core in allowed else allowed[-1]

    print("== launch_probe header ==")
    for line in _header(args.device):
        print(line)
    print(f"conditions {conds} | rounds {args.rounds} | iters {args.iters} | warmup {args.warmup}"
          f" | pin core {core} | tiny {args.tiny} | device {args.device}")
    print(flush=True)

    out = args.out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore").writeheader()

    rows = []
    t_all = time.perf_counter()
    for rnd in range(args.rounds):
        k = rnd % len(conds)
        order = conds[k:] + conds[:k]
        for cond in order:
            env = dict(os.environ)
            env["PYTHONUNBUFFERED"] = "1"
            if cond in ONE_THREAD:
                env["OMP_NUM_THREADS"] = "1"
            cmd = [sys.executable, os.path.abspath(__file__), "--child", cond,
                   "--round", str(rnd), "--core", str(core), "--iters", str(args.iters),
                   "--warmup", str(args.warmup), "--seq", str(args.seq), "--device", args.device]
            if args.tiny:
                cmd.append("--tiny")
            t0 = time.perf_counter()
            r = {"round": rnd, "cond": cond, "ok": False}
            try:
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.child_timeout)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
                if lines:
                    r = json.loads(lines[-1][len(MARK):])
                    if not r.get("ok") and "graph" in r:
                        r["error"] = r["graph"]
                else:
                    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
                    r["error"] = f"rc={p.returncode}: " + " | ".join(tail)[:400]
            except subprocess.TimeoutExpired:
                r["error"] = f"timeout after {args.child_timeout}s (killed)"
            dt = time.perf_counter() - t0
            row = _flatten(r)
            rows.append(row)
            with open(out, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore").writerow(row)
            status = "ok" if row.get("ok") else f"FAILED {row.get('error')}"
            print(f"[round {rnd + 1}/{args.rounds}] {cond:7s} wall med {_f(row.get('wall_med'))} ms"
                  f" gpu med {_f(row.get('gpu_med'))} ms cpus {row.get('cpus', '-')}"
                  f" migr {row.get('migrations', '-')} thr {row.get('threads', '-')}"
                  f" sm {row.get('sm_mhz_before', '-')}->{row.get('sm_mhz_after', '-')}"
                  f" P{row.get('pstate_after', '-')} {dt:.1f}s {status}", flush=True)
    print(f"\ntotal {time.perf_counter() - t_all:.1f}s, csv: {out}\n")

    # per-process table
    print("== per-process table (ms) ==")
    print(f"{'rnd':>3} {'cond':7} {'wall_med':>8} {'p10':>7} {'p90':>7} {'gpu_med':>8} {'p10':>7} {'p90':>7}"
          f" {'thr':>3} {'cpus':>10} {'migr':>4} {'cpuMHz':>7} {'sm0':>5} {'sm1':>5} {'P':>2} {'W1':>6}"
          f" {'1st_ms':>8} {'wu_s':>5}")
    for r in sorted(rows, key=lambda r: (conds.index(r["cond"]), r["round"])):
        if not r.get("ok"):
            print(f"{r['round']:>3} {r['cond']:7} FAILED/SKIPPED: {r.get('error') or r.get('graph')}")
            continue
        if r.get("skipped"):
            print(f"{r['round']:>3} {r['cond']:7} skipped: {r.get('graph')}")
            continue
        print(f"{r['round']:>3} {r['cond']:7} {_f(r.get('wall_med')):>8} {_f(r.get('wall_p10')):>7}"
              f" {_f(r.get('wall_p90')):>7} {_f(r.get('gpu_med')):>8} {_f(r.get('gpu_p10')):>7}"
              f" {_f(r.get('gpu_p90')):>7} {_f(r.get('threads')):>3} {str(r.get('cpus', '-'))[:10]:>10}"
              f" {_f(r.get('migrations')):>4} {_f(r.get('cpu_mhz_after'), 0):>7}"
              f" {_f(r.get('sm_mhz_before')):>5} {_f(r.get('sm_mhz_after')):>5} {_f(r.get('pstate_after')):>2}"
              f" {_f(r.get('power_w_after'), 1):>6} {_f(r.get('first_call_ms'), 1):>8} {_f(r.get('warmup_s'), 2):>5}")

    # summary
    print("\n== summary per condition: process medians (ms); spread = max/min ==")
    print(f"{'cond':7} {'n':>2} {'wall_med':>8} {'min':>7} {'max':>7} {'spread':>7} |"
          f" {'gpu_med':>8} {'min':>7} {'max':>7} {'spread':>7} | {'migr':>4} {'thr':>3} {'r(wall,gpu)':>11}"
          f" {'r(wall,migr)':>12} {'r(wall,sm)':>10}")
    for c in conds:
        ok = [r for r in rows if r["cond"] == c and r.get("ok") and not r.get("skipped")]
        n_fail = sum(1 for r in rows if r["cond"] == c and not r.get("ok"))
        if not ok:
            why = next((r.get("error") or r.get("graph") for r in rows if r["cond"] == c), "")
            print(f"{c:7} {0:>2}  no data ({n_fail} failed/skipped) {str(why)[:80]}")
            continue
        parts = [f"{c:7} {len(ok):>2}"]
        for key in ("wall_med", "gpu_med"):
            xs = [r[key] for r in ok if r.get(key) is not None]
            if xs:
                parts.append(f"{statistics.median(xs):>8.3f} {min(xs):>7.3f} {max(xs):>7.3f}"
                             f" {max(xs) / min(xs):>7.3f}")
            else:
                parts.append(f"{'-':>8} {'-':>7} {'-':>7} {'-':>7}")
        migr = statistics.fmean([r.get("migrations") or 0 for r in ok])
        thr = ok[0].get("threads")
        w = [r.get("wall_med") for r in ok]
        corr = [_pearson(w, [r.get(k) for r in ok]) for k in ("gpu_med", "migrations", "sm_mhz_after")]
        parts.append(f"{migr:>4.1f} {_f(thr):>3} {_f(corr[0], 2):>11} {_f(corr[1], 2):>12} {_f(corr[2], 2):>10}")
        line = parts[0] + " " + " | ".join(parts[1:])
        if n_fail:
            line += f"  ({n_fail} failed)"
        print(line)
    print(flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", metavar="COND", dest="cond", help="internal: run one child of this condition")
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--core", type=int, default=2, help="core for the pinned conditions")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="2-layer small BertConfig (smoke test)")
    ap.add_argument("--child-timeout", type=float, default=60.0)
    ap.add_argument("--out", default="launch_probe.csv")
    args = ap.parse_args()
    if args.cond:
        child(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
