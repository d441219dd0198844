"""Runs a grid of RunSpecs: one subprocess per (framework, model) group.

Isolation: every group runs in a fresh process, so one framework's allocator,
thread pools or a crash never touch another's. The parent only reads events,
enforces the per-group timeout, and writes rows for cells a worker could not:

- a worker that dies mid-cell: that cell becomes ``error`` (``oom`` if the
  kernel killed it), and a new worker picks up the group's remaining cells;
- a group past ``group_timeout_s``: its process group is killed, the cell in
  flight and the cells not run become ``timeout`` rows;
- an interrupted run, started again, skips every finished cell (resume).
"""
from __future__ import annotations

import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from . import env, models
from .paths import ROOT
from .frameworks import Unsupported, check_precision
from .launch import Launch, describe_exit, fresh_compile_cache, log_tail
from .results import ResultStore, make_row
from .spec import RunSpec
from .timing import TimingConfig
from .worker import EVENT_PREFIX

MAX_RESTARTS = 3
# The gate's batch: an odd shape that no sensible grid uses, so that the gate's
# trace/compile never pre-pays a cell's first call (first_call_s stays honest).
GATE_SHAPE = (3, 17)


# Keep transformers from importing the other frameworks into a worker (it
# imported TensorFlow into the PyTorch worker: +700 MB of RSS, unrelated work).
_ONLY = {"torch": {"USE_TF": "0", "USE_FLAX": "0"}, "tensorflow": {"USE_FLAX": "0"},
         "jax": {"USE_TF": "0"}, "prepare": {"USE_TF": "0", "USE_FLAX": "0"}}


def _worker_env(threads: int, device: str, framework: str) -> dict:
    e = dict(os.environ)
    e.update(_ONLY[framework])
    e.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
             TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", HF_HUB_OFFLINE="1",
             TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
             PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
                 [str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    if device == "cpu":
        e.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    return e


def _settle(w, grace_s: float = 15.0) -> None:
    """Wait up to ``grace_s`` for a worker or launch to end on its own; a
    rank or worker stuck on its way out is then killed by the caller."""
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        try:
            if w.events.get(timeout=max(0.01, end - time.monotonic())) is None:
                return
        except queue.Empty:
            return


def _hms(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


class _Worker:
    """A worker subprocess whose event lines arrive on a queue."""

    def __init__(self, job: dict, job_dir: Path, name: str, threads: int, device: str,
                 framework: str):
        job_dir.mkdir(parents=True, exist_ok=True)
        path = job_dir / f"{name}.json"
        path.write_text(json.dumps(job))
        self.log_path = job_dir / f"{name}.log"
        self._log = open(self.log_path, "a")
        env = _worker_env(threads, device, framework)
        self.cache_dir = fresh_compile_cache(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fwcompare.worker", str(path)], stdout=subprocess.PIPE,
            stderr=self._log, text=True, env=env, start_new_session=True, cwd=ROOT)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(EVENT_PREFIX):
                self.events.put(json.loads(line[len(EVENT_PREFIX):]))
        self.events.put(None)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._log.close()
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def stderr_tail(self, chars: int = 1500) -> str:
        return log_tail(self.log_path, chars)

    def exit_description(self) -> str:
        return describe_exit(self.proc.returncode)


# Params that change how a mode is built (frameworks' make_forward options).
MODE_OPTIONS = ("torch_compile_mode", "torch_compile_dynamic")
DIST_KEYS = ("weight_tol", "allreduce_repeats")
TRAIN_KEYS = ("learning_rate", "weight_decay", "beta1", "beta2", "eps", "accumulation_steps",
              "agreement_steps", "loss_tol", "loss_curve_rtol", "mp_loss_rtol")


class Runner:
    def __init__(self, params: dict, store_dir: Path, profile: str = "adhoc",
                 progress: bool = True, task: str = "inference", precision_errors: bool = False,
                 acceleration: bool = False, distributed: bool = False):
        """``precision_errors``: inference outputs are logits for decoders (hidden
        states for encoders) and each cell's output is compared with a float64
        PyTorch reference computed for its shape (the mixed-precision study).
        ``acceleration``: every mode runs in a process of its own, compiled
        modes checked against eager per cell (the acceleration study).
        ``distributed``: each (framework, mode, worker count) is one launch of
        that many ranks with the framework's launcher (the distributed study)."""
        self.params = params
        self.task = task
        self.precision_errors = precision_errors
        self.acceleration = acceleration
        self.distributed = distributed
        self.store = ResultStore(store_dir)
        self.profile = profile
        self.progress = progress
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self.threads = params["threads"] or env.default_threads()
        self.manifest = env.manifest(params)
        self.provenance = {
            "versions": self.manifest["versions"], "git_commit": self.manifest["git_commit"],
            "git_dirty": self.manifest["git_dirty"], "params_hash": self.manifest["params_hash"],
            "hostname": self.manifest["hostname"], "cpu_model": self.manifest["cpu_model"]}
        self.timing = {k: params[k] for k in asdict(TimingConfig()) if k in params}
        self.work_dir = self.store.dir / "work"

    # -- rows the parent writes for cells no worker finished -------------------
    def _fail(self, spec: RunSpec, rnd: int, status: str, error: str) -> None:
        self.store.append(make_row(spec, status=status, error=error, run_id=self.run_id,
                                   profile=self.profile, round=rnd,
                                   provenance=self.provenance))
        self._cell_done(spec, status, error=error)

    def _cell_done(self, spec: RunSpec, status: str, median_s=None, ci=None, error="") -> None:
        self.done += 1
        self.bar.update(1)
        if median_s is not None:
            lo, hi = ci or (None, None)
            ci_txt = f" [{lo:.4g}, {hi:.4g}]" if lo is not None and hi == hi and lo == lo else ""
            detail = f"{median_s:.4g} s{ci_txt}"
        else:
            detail = error.splitlines()[0][:120] if error else ""
        spent = time.monotonic() - self.t_start
        done_now = self.done - self.done_before  # cells finished in this run (not resumed)
        left = spent / done_now * (self.total - self.done) if done_now else 0
        self._say(f"[{self.done}/{self.total}] {spec.label}: {status} {detail} "
                  f"| {_hms(spent)} elapsed, ~{_hms(left)} left")

    def _say(self, message: str) -> None:
        if self.progress:
            tqdm.write(message, file=sys.stdout)  # keeps a terminal bar intact

    # -- jobs -------------------------------------------------------------------
    def _key(self, model: str) -> str:
        return models.model_key(model, self.params["seed"], self._head(model))

    def _head(self, model: str) -> str:
        config = models.config_for(model)
        if self.task == "train":
            return models.train_head(config)
        if self.precision_errors and config.model_type in models.DECODERS:
            return "causal_lm"  # logits: argmax agreement is next-token agreement
        return "base"

    def _job(self, kind: str, model: str, **extra) -> dict:
        train = {k: self.params[k] for k in TRAIN_KEYS if k in self.params}
        train.setdefault("accumulation_steps", 1)
        if "stability_steps" in self.params:
            train["agreement_steps"] = self.params["stability_steps"]
        gate_shape = (GATE_SHAPE[0] * train["accumulation_steps"], GATE_SHAPE[1])
        if self.distributed:  # split evenly over every worker count
            gate_shape = (2 * math.lcm(*self.params["workers"]), GATE_SHAPE[1])
        return {"kind": kind, "task": self.task, "model": model, "seed": self.params["seed"],
                "head": self._head(model), "model_key": self._key(model),
                "device": self.params["device"], "threads": self.threads,
                "gate_dir": str(self.work_dir / "gate"),
                "gate_shape": gate_shape,
                "store_dir": str(self.store.dir), "run_id": self.run_id,
                "profile": self.profile, "timing": self.timing,
                "equiv_tol": self.params.get("equiv_tol"),
                "mp_equiv_rtol": self.params.get("mp_equiv_rtol"),
                "acceleration": self.acceleration, "accel_tol": self.params.get("accel_tol"),
                "mode_options": {k: self.params[k] for k in MODE_OPTIONS if k in self.params},
                **{k: self.params[k] for k in DIST_KEYS if k in self.params},
                "collective_timeout_s": self.params.get("group_timeout_s"),
                "train": train, "provenance": self.provenance, **extra}

    def _prepare(self, model: str, cells: list[tuple[RunSpec, int]]) -> str | None:
        """Weights and the gate's reference(s); returns an error message or None."""
        shapes = sorted({(s.batch_size, s.seq_len) for s, _ in cells})
        job = self._job("prepare", model,
                        fp64_shapes=shapes if self.precision_errors and self.task == "inference"
                        else [])
        w = _Worker(job, self.work_dir / "jobs",
                    f"prepare-{self._key(model)}", self.threads, self.params["device"],
                    "prepare")
        try:
            w.proc.wait(timeout=self.params["group_timeout_s"])
        except subprocess.TimeoutExpired:
            w.kill()
            return f"preparing weights timed out after {self.params['group_timeout_s']:g} s"
        w.kill()
        if w.proc.returncode != 0:
            return f"preparing weights failed ({w.exit_description()}): {w.stderr_tail()}"
        return None

    def _spawn(self, job: dict, name: str, framework: str, cells):
        """The worker process of a group, or a launch of a data-parallel run's ranks."""
        if not self.distributed:
            return _Worker(job, self.work_dir / "jobs", name, self.threads,
                           self.params["device"], framework)
        spec = cells[0][0]
        job.update(mode=spec.mode, threads=spec.threads)
        return Launch(job, self.work_dir / "jobs", f"{name}-x{spec.workers}",
                      _worker_env(spec.threads, self.params["device"], framework),
                      framework=framework, workers=spec.workers, hosts=self.params["hosts"],
                      node_rank=self.params["node_rank"], master_port=self.params["master_port"])

    def _follow(self, framework: str, model: str, cells: list[tuple[RunSpec, int]]) -> None:
        """On a host other than node 0: run this host's ranks until the launch
        ends; rank 0, on node 0, writes the rows."""
        job = self._job("group", model, framework=framework,
                        cells=[{"spec": s.to_dict(), "round": r} for s, r in cells])
        w = self._spawn(job, f"{framework}-{self._key(model)}", framework, cells)
        deadline = time.monotonic() + self.params["group_timeout_s"]
        try:
            while w.running() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            w.kill()
        self._say(f"{framework} x{cells[0][0].workers}: this host's ranks ended "
                  f"({w.exit_description()})")

    def _run_group(self, framework: str, model: str, cells: list[tuple[RunSpec, int]]) -> None:
        remaining = {(s.cell_id, r): (s, r) for s, r in cells}
        deadline = time.monotonic() + self.params["group_timeout_s"]
        restarts = 0
        while remaining:
            job = self._job("group", model, framework=framework,
                            cells=[{"spec": s.to_dict(), "round": r} for s, r in remaining.values()])
            kinds = sorted({s.mode for s, _ in remaining.values()}) + sorted(
                {s.dtype for s, _ in remaining.values()} - {"float32"})
            name = f"{framework}-{'-'.join(kinds)}-{self._key(model)}"
            w = self._spawn(job, name, framework, list(remaining.values()))
            in_flight, timed_out, cell_timed_out, started = None, False, False, 0.0
            cell_limit = self.params.get("cell_timeout_s") or math.inf
            try:
                while True:
                    try:
                        ev = w.events.get(timeout=0.5)
                    except queue.Empty:
                        now = time.monotonic()
                        if now > deadline:
                            timed_out = True
                            break
                        if in_flight is not None and now - started > cell_limit:
                            cell_timed_out = True
                            break
                        continue
                    if ev is None:
                        break
                    key = (ev.get("cell"), ev.get("round"))
                    if ev["event"] == "start":
                        in_flight, started = key, time.monotonic()
                        self.bar.set_postfix_str(ev["label"], refresh=True)
                    elif ev["event"] == "done":
                        spec, _ = remaining.pop(key)
                        in_flight = None
                        self._cell_done(spec, ev["status"], ev.get("median_s"), ev.get("ci"),
                                       ev.get("error", ""))
                        if not remaining:  # every row is written: a short wait for a
                            _settle(w)          # clean exit (ranks on other hosts need it)
                            break
            finally:
                w.kill()
            if timed_out:
                limit = self.params["group_timeout_s"]
                for key, (spec, rnd) in list(remaining.items()):
                    msg = (f"no result within the group timeout ({limit:g} s)" if key == in_flight
                           else f"not run: group timeout ({limit:g} s) reached")
                    self._fail(spec, rnd, "timeout", msg)
                return
            if not remaining:
                return
            if cell_timed_out:  # that cell only; a fresh worker takes the rest
                spec, rnd = remaining.pop(in_flight)
                self._fail(spec, rnd, "timeout",
                           f"no result within cell_timeout_s ({cell_limit:g} s); the worker was "
                           "stopped and the group's other cells continued")
                continue
            why = f"worker {w.exit_description()}: {w.stderr_tail()}"
            if in_flight is None or restarts >= MAX_RESTARTS:
                for spec, rnd in list(remaining.values()):
                    self._fail(spec, rnd, "error", why)
                return
            spec, rnd = remaining.pop(in_flight)
            killed = w.proc.returncode == -signal.SIGKILL
            self._fail(spec, rnd, "oom" if killed else "error",
                       ("worker killed by SIGKILL (likely the kernel's out-of-memory killer); "
                        if killed else "") + why)
            restarts += 1

    def _groups(self, cells: list[tuple[RunSpec, int]], order: list[str]):
        """(framework, cells) per worker process. Inference modes share one
        process (a model per precision); each training mode trains its own model,
        so it gets its own process, and its memory is not inflated by another
        mode's leftovers; in the acceleration study each mode gets its own
        process, so its first call is a cold start. Precisions unsupported on
        the device get no process."""
        for fw in order:
            mine = [(s, r) for s, r in cells if s.framework == fw]
            # Ascending size, so a cell's peak RSS is not inflated by a larger
            # cell's allocator caches.
            mine.sort(key=lambda c: (c[0].batch_size * c[0].seq_len, c[0].batch_size,
                                     c[0].mode))
            unsupported: dict[str, str] = {}
            for dtype in {s.dtype for s, _ in mine}:
                try:  # e.g. tf32 on a CPU
                    check_precision(dtype, self.params["device"])
                except Unsupported as exc:
                    unsupported[dtype] = str(exc)
            for s, r in mine:
                if s.dtype in unsupported:
                    self._fail(s, r, "unsupported", unsupported[s.dtype])
            mine = [(s, r) for s, r in mine if s.dtype not in unsupported]
            if self.distributed:  # one launch per worker count
                for key in sorted({(s.mode, s.workers) for s, _ in mine}):
                    yield fw, [(s, r) for s, r in mine if (s.mode, s.workers) == key]
            elif self.task == "train" or self.acceleration:
                for mode in sorted({s.mode for s, _ in mine}):
                    yield fw, [(s, r) for s, r in mine if s.mode == mode]
            elif mine:
                yield fw, mine

    def run(self, specs: list[RunSpec]) -> None:
        rounds = self.params["rounds"]
        self.store.begin(self.manifest["params_hash"])
        models.save_json(self.store.dir / "env.json", self.manifest)
        models.save_json(self.store.dir / "params.json", self.params)
        done = self.store.finished()
        todo = [(s, r) for r in range(rounds) for s in specs if (s.cell_id, r) not in done]
        total = len(specs) * rounds
        self.total, self.done = total, total - len(todo)
        self.done_before, self.t_start = self.done, time.monotonic()
        # The bar only on a terminal; in a notebook or log, the per-cell lines carry
        # the progress (cells done / total, current cell, time left).
        self.bar = tqdm(total=total, initial=total - len(todo), unit="cell",
                        disable=not (self.progress and sys.stderr.isatty()), file=sys.stderr,
                        dynamic_ncols=True,
                        bar_format="{l_bar}{bar:20}| {n_fmt}/{total_fmt} cells "
                                   "[{elapsed}<{remaining}]{postfix}")
        if len(todo) < total:
            self._say(f"resuming: {total - len(todo)} of {total} cells already done")
        try:
            prepared: dict[str, str | None] = {}
            frameworks = list(self.params["frameworks"])
            for rnd in range(rounds):
                # Alternate group order between rounds so drift shows as spread, not bias.
                order = frameworks if rnd % 2 == 0 else frameworks[::-1]
                for model in dict.fromkeys(s.model for s in specs):  # a task's own models
                    mine = [(s, r) for s, r in todo if r == rnd and s.model == model]
                    if not mine:
                        continue
                    if model not in prepared:
                        self.bar.set_postfix_str(f"preparing {model}", refresh=True)
                        prepared[model] = self._prepare(
                            model, [(s, r) for s, r in todo if s.model == model])
                    for fw, cells in self._groups(mine, order):
                        if prepared[model]:
                            for s, r in cells:
                                self._fail(s, r, "error", prepared[model])
                        elif self.params.get("node_rank"):
                            self._follow(fw, model, cells)
                        else:
                            self._run_group(fw, model, cells)
        finally:
            self.bar.close()
        self.store.consolidate()
