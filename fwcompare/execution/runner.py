"""Runs a study's cells: worker processes per group, the study deciding the groups.

Isolation: every group runs in a fresh process (or one launch of ranks), so
one framework's allocator, thread pools or a crash never touch another's; a
worker is forked from its framework's pre-imported server
(:mod:`fwcompare.execution.forkserver`), which has run nothing, where there is one. The
parent hands each worker a typed job (:class:`fwcompare.plan.job.Job`), asks it for
each cell's steps (:mod:`fwcompare.core.messages`: prepare, sample, memory, finish),
enforces the timeouts, and writes rows for cells a worker could not. The
task's schedule (``Study.schedule``) picks the order of the steps
(:mod:`fwcompare.execution.schedules`): ``sequential`` (one cell after another, a
process per group) or ``interleaved`` (a process per variant, the variants of
one shape sampled in turns); the runner keeps the cells' lifecycle. Either way:

- a worker that dies mid-cell: that cell becomes ``error`` (``oom`` if the
  kernel killed it), and a new worker picks up the group's remaining cells;
- a cell past ``cell_timeout_s``: the worker is killed, the cell becomes
  ``timeout``, a fresh worker takes the rest;
- a group past ``group_timeout_s``: its process group is killed, the cell in
  flight and the cells not run become ``timeout`` rows;
- an interrupted run, started again, skips every finished cell (resume).

Nothing here knows a study by name: the study's hooks (``fwcompare.execution.study``)
say what its cells are, how they share processes and what a worker does.
"""
from __future__ import annotations

import contextlib
import hashlib
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
from pathlib import Path

from tqdm import tqdm

from ..core import env, messages
from ..measure import peak
from . import schedules
from ..core.atomic import write_json
from .context import RunContext
from .forkserver import ForkServerError, ForkServers, kill_group
from ..frameworks import Unsupported, check_precision, not_installed, worker_env
from ..frameworks import find as find_framework
from ..core.machine_load import HostMeter
from ..plan.job import CELLS, PREPARE, CellRef, Job
from ..plan.run import RunPlan
from ..core.models import not_installed as model_not_installed
from ..core.messages import WorkerStop
from .launch import (describe_exit, fresh_compile_cache, fresh_tmpdir, last_error_line, log_tail,
                     use_compile_cache)
from ..plan.schema import timing_config
from ..core.paths import ROOT
from ..results.store import BREAKDOWN, ResultStore, make_row, record_run
from .schedules import sequential
from ..core.spec import RunSpec
from .study import module_file

MAX_RESTARTS = 3

def _hms(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def compiles(job: Job) -> bool:
    """Whether a cell of ``job`` compiles device code (``Framework.compiles``)."""
    fw = find_framework(job.framework)
    return fw is not None and any(fw.compiles(c.spec.mode) for c in job.cells)


class Worker:
    """A served worker process (``python -m fwcompare.commands.worker JOB.json``): its
    requests go to stdin, its events arrive on a queue (None: it ended)."""

    autonomous = False  # it waits for requests (a launch of ranks runs on its own)
    stop_note = ""  # why the runner's side killed it, when it did (the row's message)

    def __init__(self, job: Job, job_dir: Path, name: str, env: dict, server=None,
                 compile_cache: Path | None = None):
        path = job.write(job_dir / f"{name}.json")
        self.log_path = job_dir / f"{name}.log"
        self._log = open(self.log_path, "a")
        env = dict(env)
        if compile_cache is not None:  # the runner's: kept for the variant's next rounds
            use_compile_cache(env, compile_cache, xla=True)
            self.cache_dir = None
        else:
            self.cache_dir = fresh_compile_cache(env)
        self.tmp_dir = fresh_tmpdir(env)  # removed by kill (launch.fresh_tmpdir)
        self.proc = None
        if server is not None:  # forked from its framework's pre-imported server
            try:
                self.proc = server.spawn(path, env, self._log, compiles=compiles(job))
            except ForkServerError as exc:
                self._log.write(f"fwcompare: fork server failed ({exc}); a fresh process\n")
                self._log.flush()
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fwcompare.commands.worker", str(path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env,
                start_new_session=True, cwd=ROOT)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            ev = messages.parse_event(line)
            if ev is not None:
                self.events.put(ev)
        self.events.put(None)

    def send(self, op: str, **fields) -> None:
        try:
            messages.send(self.proc.stdin, op, **fields)
        except (BrokenPipeError, OSError, ValueError):
            pass  # it has ended: its end of output says so

    def running(self) -> bool:
        return self.proc.poll() is None

    def signal_kill(self) -> None:
        """SIGKILL its process group, without waiting (:meth:`kill` waits)."""
        if self.proc.poll() is None:
            kill_group(self.proc.pid)

    def kill(self) -> None:
        self.signal_kill()
        self.proc.wait()
        try:
            self.proc.stdin.close()  # stdout stays with its reader thread (it sees the end)
        except (OSError, ValueError):
            pass
        self._log.close()
        if self.cache_dir is not None:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def stderr_tail(self, chars: int = 1500) -> str:
        return log_tail(self.log_path, chars)

    def exit_description(self) -> str:
        return describe_exit(self.proc.returncode)


class Passes:
    """What the round passes of one study's run share (``fwcompare.run_studies``
    measures round 0 of every study, then round 1 of every study, and so on,
    so a slow spell of the machine lands on one round of several studies
    rather than on every round of one): the run id, the models already
    prepared (weights, gate references, exports: made once, in the first
    pass), and per task the time spent so far and the cells measured."""

    def __init__(self):
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self.prepared: dict[tuple[str, str], str | None] = {}  # (task, model): error or None
        self.phases: dict[str, dict[str, float]] = {}  # task: phase: seconds
        self.cells: dict[str, int] = {}  # task: cells measured
        # task: its schedule, resolved once
        self.gpu_schedules: dict[str, schedules.shared_gpu.GpuSchedule] = {}


class Runner:
    def __init__(self, plan: RunPlan, store_dir: Path, profile: str = "adhoc",
                 progress: bool = True, task: str = "inference",
                 servers: ForkServers | None = None, upto_round: int | None = None,
                 passes: Passes | None = None):
        """``plan``: the run's cells and rounds (its ``more``: extra rounds
        after the params' rounds, of the cells a doubtful claim used).
        ``upto_round``: measure rounds 0 to ``upto_round`` only (one round
        pass; the later rounds are left for the next pass, which ``passes``
        ties to this one); None: every round."""
        study, params = plan.study, plan.params
        self.plan, self.study, self.params, self.task = plan, study, params, task
        # A framework this machine lacks: its cells unsupported, no worker started
        self.not_installed = {fw: why for fw in params["frameworks"]
                              if (why := not_installed(fw))}
        self.servers, self._own_servers = servers, servers is None
        self.store = ResultStore(store_dir)
        self.profile = profile
        self.progress = progress
        self.passes, self._passes_given = passes or Passes(), passes is not None
        self.more = plan.more
        self.upto_round = plan.rounds - 1 if upto_round is None else upto_round
        self.run_id = self.passes.run_id
        self.threads = params["threads"] or env.default_threads()
        # The thread variables of the workers' environment (a rank's share
        # where the study says so); a job's own threads are set at configure.
        self.env_threads = study.worker_threads(params) or self.threads
        self.manifest = env.manifest(params)
        # Interleaved on a GPU where the variants fit on it together, else
        # sequential with the reason in every row (schedules/shared_gpu.py); resolved
        # in the first round pass, kept for the later ones.
        if task not in self.passes.gpu_schedules:
            self.passes.gpu_schedules[task] = self._gpu_schedule()
        self.gpu_schedule = self.passes.gpu_schedules[task]
        self.provenance = {
            "versions": self.manifest["versions"], "git_commit": self.manifest["git_commit"],
            "git_dirty": self.manifest["git_dirty"], "params_hash": self.manifest["params_hash"],
            "hostname": self.manifest["hostname"], "cpu_model": self.manifest["cpu_model"],
            "schedule": self.gpu_schedule.schedule, "schedule_note": self.gpu_schedule.note}
        self.timing = timing_config(params, self.gpu_schedule.schedule)
        self.work_dir = self.store.dir / "work"
        self._heads: dict[str, str] = {}
        # where the run's time went (seconds), summed over its round passes
        self.phases: dict[str, float] = self.passes.phases.setdefault(task, {})
        self.host = HostMeter()  # what else the machine did while cells were sampled
        # what the schedules and the study's hooks are handed: a narrow view of this
        self.context = RunContext(self)


    def _gpu_schedule(self) -> "schedules.shared_gpu.GpuSchedule":
        """This task's schedule: the study's, unless its variants would share a
        GPU they do not fit on together (:func:`schedules.shared_gpu.resolve`)."""
        from ..core.models import config_for

        wanted = self.study.schedule(self.params, self.task)
        if wanted != "interleaved" or self.params["device"] != "gpu":
            return schedules.shared_gpu.GpuSchedule(wanted, "")
        cells = [s for s in self.plan.specs if s.task == self.task
                 and s.framework not in self.not_installed and not self.model_problem(s.model)]
        from .schedules.interleaved import variant_key

        needs = schedules.shared_gpu.set_bytes(cells, config_for,
                                               lambda s: variant_key(CellRef(s, 0)))
        chosen = schedules.shared_gpu.resolve(wanted, "gpu", needs, env.gpu_free_bytes())
        if chosen.note:
            self.say(f"{self.study.name} ({self.task}): {chosen.note}")
        return chosen

    def model_problem(self, model: str) -> str:
        """Why none of ``model``'s cells can run here: its package is missing
        (``models.not_installed``) or the study cannot run it at all."""
        return model_not_installed(model) or self.study.model_problem(model)

    # -- where the time goes ----------------------------------------------------------
    def charge(self, phase: str, seconds: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + max(0.0, seconds)

    def recharge(self, phase: str, to: str, seconds: float) -> None:
        """Move ``seconds`` already charged to ``phase`` over to ``to``."""
        seconds = min(max(0.0, seconds), self.phases.get(phase, 0.0))
        self.phases[phase] = self.phases.get(phase, 0.0) - seconds
        self.charge(to, seconds)

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.charge(name, time.monotonic() - t0)

    # -- rows the parent writes for cells no worker finished -------------------
    def fail(self, ref: CellRef, status: str, error: str) -> None:
        self.record(ref, status, error, self.study.failure_figures(self.params, ref))

    def record(self, ref: CellRef, status: str, error: str = "", figures: dict | None = None,
               provenance: dict | None = None) -> None:
        """A row the parent writes itself (a cell no worker finished, or one a
        study computes from other rows: a largest-batch search), and its
        progress line."""
        self.store.append(make_row(ref.spec, status=status, error=error, figures=figures,
                                   run_id=self.run_id, profile=self.profile, round=ref.round,
                                   provenance=provenance or self.provenance))
        self.cell_done(ref.spec, status, error=error)

    def cell_done(self, spec: RunSpec, status: str, median_s=None, ci=None, error="") -> None:
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
        self.say(f"[{self.done}/{self.total}] {spec.label}: {status} {detail} "
                  f"| {_hms(spent)} elapsed, ~{_hms(left)} left")

    def say(self, message: str) -> None:
        if self.progress:
            tqdm.write(message, file=sys.stdout)  # keeps a terminal bar intact

    # -- jobs and processes -------------------------------------------------------
    def head(self, model: str) -> str:
        if model not in self._heads:
            self._heads[model] = self.study.head(self.task, model)
        return self._heads[model]

    def model_key(self, model: str) -> str:
        return self.study.model_key(model, self.params["seed"], self.head(model))

    def job(self, kind: str, model: str, framework: str = "",
            cells: list[CellRef] = (), fp64_shapes=()) -> Job:
        return Job(kind=kind, study=self.study.name, study_file=module_file(self.study),
                   task=self.task, model=model, head=self.head(model),
                   model_key=self.model_key(model), device=self.params["device"],
                   threads=self.threads, gate_dir=str(self.work_dir / "gate"),
                   gate_shape=self.study.gate_shape(self.params, self.task),
                   store_dir=str(self.store.dir), run_id=self.run_id, profile=self.profile,
                   timing=self.timing, params=self.params, provenance=self.provenance,
                   framework=framework, cells=tuple(cells), fp64_shapes=tuple(fp64_shapes),
                   memory_rounds=tuple(dict.fromkeys(
                       c.spec.cell_id for c in cells if self.plan.memory_every_round(c.spec))))

    def worker_env(self, threads: int, framework: str) -> dict:
        return worker_env(threads, self.params["device"], framework)

    def spawn_worker(self, job: Job, name: str) -> Worker:
        return self._worker(job, name, job.framework)

    def _worker(self, job: Job, name: str, kind: str) -> Worker:
        """A served worker, forked from its environment's fork server when
        there is one (waiting for the server's imports counts as this one's)."""
        env = self.worker_env(self.env_threads, kind)
        with self.phase("process start and imports"):
            return Worker(job, self.work_dir / "jobs", name, env, self.server_for(env),
                          self.compile_cache(job) if job.cells else None)

    def server_for(self, env: dict):
        """The run's ready fork server for ``env`` (waiting for its imports),
        or None (none, or it failed: the caller starts a fresh interpreter)."""
        if self.servers is None:
            return None
        return self.servers.server_for(env, self.params["group_timeout_s"])

    def compile_cache(self, job: Job) -> Path:
        """The compile caches of a job's variants (torch.compile's, and JAX's
        and TensorFlow's persistent XLA caches). Round 0 starts them empty,
        so its first calls are the cold compiles that the acceleration study
        reports; the later rounds' fresh processes reuse them: their compile
        is a cache hit (a fraction of the cold compile: measurements.md, "comments quoted") and
        their steady state runs the same compiled code. Only
        round 0's first calls are reported (``tables.summarize``)."""
        # a variant axis too (twins: the error-rates benchmark's): a lane restarted
        # in round 0 empties its own cache, never a live twin's (its TMPDIR as well)
        variants = sorted({(c.spec.framework, c.spec.mode, c.spec.dtype, *c.spec.variant_axes)
                           for c in job.cells})
        key = hashlib.sha1(repr((job.task, job.model_key, variants)).encode()).hexdigest()[:12]
        path = self.work_dir / "compile" / key
        if min(c.round for c in job.cells) == 0:  # round 0 (a restart too) compiles cold
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def start_servers(self, models: list[str]) -> None:
        """Fork servers for this run's workers (every framework, with the
        study's ``worker_threads``, and the prepare job), importing while the
        weights are prepared. None with FWCOMPARE_FORKSERVER=0 (every worker a
        fresh interpreter). A server is pinned to the run's cores: a rank
        forked from it takes its own share (``host.pin_threads``)."""
        if os.environ.get("FWCOMPARE_FORKSERVER") == "0":
            return
        if self.servers is None:
            self.servers = ForkServers(self.work_dir / "jobs")
        kinds = [fw for fw in self.params["frameworks"] if fw not in self.not_installed]
        for kind in [*kinds, "prepare"]:  # prepare: torch's, usually
            self.servers.start(self.worker_env(self.env_threads, kind), self.threads, kind,
                               self.study.name, module_file(self.study), models)

    def _prepare(self, model: str, cells: list[CellRef]) -> str | None:
        """Weights and the gate's reference(s); returns an error message or None."""
        job = self.job(PREPARE, model,
                       fp64_shapes=self.study.fp64_shapes(self.task, [c.spec for c in cells]))
        w = self._worker(job, f"prepare-{self.model_key(model)}", "prepare")
        try:
            with self.phase(self.study.prepare_phase):
                w.proc.wait(timeout=self.params["group_timeout_s"])
        except subprocess.TimeoutExpired:
            return f"preparing weights timed out after {self.params['group_timeout_s']:g} s"
        finally:
            w.kill()  # on every way out, an interrupt included
        if w.proc.returncode != 0:
            tail = w.stderr_tail()
            return (f"preparing weights failed ({w.exit_description()}): "
                    f"{last_error_line(tail)}\n{tail}")
        return None

    # -- one group ----------------------------------------------------------------------
    def run_group(self, model: str, group: list[CellRef]) -> None:
        """Run a group in a worker, restarting after a crash or a cell's
        timeout until every cell has a row."""
        framework = group[0].spec.framework
        remaining = {c.key: c for c in group}
        deadline = time.monotonic() + self.params["group_timeout_s"]
        cell_limit = self.params["cell_timeout_s"] or math.inf
        restarts = 0
        while remaining:
            kinds = sorted({c.spec.mode for c in remaining.values()}) + sorted(
                {c.spec.dtype for c in remaining.values()} - {"float32"})
            name = f"{framework}-{'-'.join(kinds)}-{self.model_key(model)}"
            w = self.study.spawn(self.context, self.job(CELLS, model, framework,
                                                list(remaining.values())), name)
            flight = sequential.Flight()
            try:
                why = ""
                try:
                    sequential.drive(self.context, w, remaining, deadline, cell_limit, flight)
                except WorkerStop as stop:
                    why = str(stop)
                if not remaining:  # every row is written: a short wait for a
                    with self.phase("process exits"):  # clean exit (ranks on other
                        sequential.settle(w)            # hosts need it)
            finally:
                w.kill()
            if not self.after_stop(w, why, remaining, flight.key, restarts):
                return
            restarts += why != "cell_timeout"  # a crash; a timeout costs the cell only

    def after_stop(self, w, why: str, remaining: dict[str, CellRef], in_flight: str | None,
                   restarts: int) -> bool:
        """Rows for the cells a stopped worker leaves behind (``why``:
        group_timeout, cell_timeout, lost or ""); whether a fresh worker should
        take the ``remaining`` cells (after a crash or a cell's timeout)."""
        if why == "group_timeout":
            limit = self.params["group_timeout_s"]
            for key, ref in list(remaining.items()):
                self.fail(ref, "timeout",
                          f"no result within the group timeout ({limit:g} s)"
                          if key == in_flight else
                          f"not run: group timeout ({limit:g} s) reached")
            remaining.clear()
            return False
        if not remaining:
            return False
        if why == "cell_timeout":  # that cell only; a fresh worker takes the rest
            cell_limit = self.params["cell_timeout_s"] or math.inf
            self.fail(remaining.pop(in_flight), "timeout",
                      f"no result within cell_timeout_s ({cell_limit:g} s); the worker was "
                      "stopped and the group's other cells continued")
            return True
        message = f"worker {w.exit_description()}: {w.stderr_tail()}"
        if in_flight is None or in_flight not in remaining or restarts >= MAX_RESTARTS:
            for ref in list(remaining.values()):
                self.fail(ref, "error", message)
            remaining.clear()
            return False
        killed = w.proc.returncode == -signal.SIGKILL
        self.fail(remaining.pop(in_flight), "oom" if killed else "error",
                  w.stop_note if killed and w.stop_note else
                  ("worker killed by SIGKILL (likely the kernel's out-of-memory killer); "
                   if killed else "") + message)
        return True

    def _groups(self, cells: list[CellRef], order: list[str]):
        """(framework's) groups in the order to run: the frameworks in ``order``,
        each split into worker processes by the study. Precisions the device
        cannot run get no process: their cells are ``unsupported`` rows."""
        for fw in order:
            mine = [c for c in cells if c.spec.framework == fw]
            unsupported: dict[str, str] = {}
            for dtype in {c.spec.dtype for c in mine}:
                try:  # e.g. tf32 on a CPU
                    check_precision(dtype, self.params["device"])
                except Unsupported as exc:
                    unsupported[dtype] = str(exc)
            for c in mine:
                if c.spec.dtype in unsupported:
                    self.fail(c, "unsupported", unsupported[c.spec.dtype])
            mine = [c for c in mine if c.spec.dtype not in unsupported]
            yield from self.study.groups(self.task, mine)

    def run(self, specs: list[RunSpec]) -> None:
        rounds = self.plan.rounds
        self.store.begin(self.manifest["params_hash"])
        done = self.store.finished()
        whole = self.plan.of(specs)
        every = [c for c in whole if (c.spec.cell_id, c.round) not in done]  # prepare's
        planned = [c for c in whole if c.round <= self.upto_round]  # this pass's
        todo = [c for c in planned if (c.spec.cell_id, c.round) not in done]
        # Every cell already measured (a notebook after `fwcompare report` measured
        # them): the run's records stay as the measuring run wrote them.
        idle = not todo and (self.store.dir / "env.json").is_file()
        if not idle:
            write_json(self.store.dir / "env.json", self.manifest)
            write_json(self.store.dir / "params.json", dict(self.params))
        total = len(planned)
        self.total, self.done = total, total - len(todo)
        self.done_before, self.t_start = self.done, time.monotonic()
        # The bar only on a terminal; in a notebook or log, the per-cell lines carry
        # the progress (cells done / total, current cell, time left).
        self.bar = tqdm(total=total, initial=total - len(todo), unit="cell",
                        disable=not (self.progress and sys.stderr.isatty()), file=sys.stderr,
                        dynamic_ncols=True,
                        bar_format="{l_bar}{bar:20}| {n_fmt}/{total_fmt} cells "
                                   "[{elapsed}<{remaining}]{postfix}")
        if self._passes_given and self.more:  # an extra round of a doubtful claim's cells
            self.say(f"{self.study.name} ({self.task}): extra round {self.more} for doubtful "
                     f"claims, {len(todo)} cells")
        elif self._passes_given and rounds > 1:  # a round pass: the cells of rounds <= k
            self.say(f"{self.study.name} ({self.task}): round pass {self.upto_round + 1} of "
                     f"{rounds}, {total} cells of rounds 1 to {self.upto_round + 1}")
        if len(todo) < total and not (self._passes_given and self.upto_round > 0):
            self.say(f"resuming: {total - len(todo)} of {total} cells already done")
        try:
            # A machine that cannot run the study at all (too few GPUs for its
            # launches): every cell says so, nothing is started
            problem = self.study.machine_problem(self.params) if todo else ""
            for c in todo if problem else ():
                self.fail(c, "unsupported", problem)
            todo = [] if problem else todo
            if todo:
                self.start_servers(list(dict.fromkeys(c.spec.model for c in todo)))
            # The machine's peak, probed with a model this machine has (a real
            # model's package may be missing: models.not_installed)
            probe = next((m for m in dict.fromkeys(s.model for s in specs)
                          if not self.model_problem(m)), None)
            if probe and not idle and not problem:
                peak.measure(self, probe, sorted({s.dtype for s in specs}))
            prepared = self.passes.prepared
            frameworks = list(self.params["frameworks"])
            for rnd in range(rounds):
                # Alternate group order between rounds so drift shows as spread, not bias.
                order = frameworks if rnd % 2 == 0 else frameworks[::-1]
                for model in dict.fromkeys(s.model for s in specs):  # a task's own models
                    mine = [c for c in todo if c.round == rnd and c.spec.model == model]
                    for c in [c for c in mine if c.spec.framework in self.not_installed]:
                        self.fail(c, "unsupported", self.not_installed[c.spec.framework])
                    mine = [c for c in mine if c.spec.framework not in self.not_installed]
                    if not mine:
                        continue
                    problem = self.model_problem(model)
                    if problem:  # nothing to prepare: every cell says why
                        for c in mine:
                            self.fail(c, "unsupported", problem)
                        continue
                    made = (self.task, model)
                    if made not in prepared:
                        self.bar.set_postfix_str(f"preparing {model}", refresh=True)
                        prepared[made] = self._prepare(  # for this pass and the next
                            model, [c for c in every if c.spec.model == model])
                    groups = list(self._groups(mine, order))
                    if prepared[made]:
                        for c in (c for group in groups for c in group):
                            self.fail(c, "error", prepared[made])
                    else:
                        schedules.run(self.gpu_schedule.schedule, self.context, model, groups, rnd)
        finally:
            if self._own_servers and self.servers is not None:
                self.servers.close()
                self.servers = None
            # kept for the next round pass (round passes: run_studies removes them at the end)
            if not self._passes_given and self.upto_round >= rounds - 1:
                shutil.rmtree(self.work_dir / "compile", ignore_errors=True)
            self.bar.close()
            self.charge("total", time.monotonic() - self.t_start)
            measured = self.passes.cells[self.task] = (self.passes.cells.get(self.task, 0)
                                                       + self.done - self.done_before)
            if not idle:
                write_json(self.store.dir / BREAKDOWN.format(task=self.task), self.phases)
            if measured:  # a run that measured nothing keeps the last record
                record_run(self.store.dir, self.task, self.run_id, measured,
                           self.phases["total"], self.params["device"],
                           self.manifest["cpu_model"])
        if not idle or not self.store.consolidated():
            # an idle run (a notebook after the report measured) rewrites nothing:
            # the scorecard's stamp, read while the notebooks run, stays true
            self.store.consolidate()
