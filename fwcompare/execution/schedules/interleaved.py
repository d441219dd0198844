"""The interleaved schedule: the variants of one model and shape, each in a
worker process of its own, sampled one block each in turn.

The machine's speed drifts by 10-25% over minutes; two variants timed minutes
apart in different processes carry that drift into their ratio, and an
interval from one sampling window does not cover a rerun. Interleaving puts a
slow minute on every variant alike (Google Benchmark's random interleaving,
asv's interleaved processes). For one model in one round:

1. a lane (a worker process) per variant: framework, mode and precision.
   All lanes start at once; nothing is timed until every one has said
   ``ready`` (its imports done).
2. Every lane builds its variant (model and gate), as many at once as there
   are cores: a build is mostly one thread of Python, and more builds at once
   only contend (nine MP training lanes at once on 2 cores: JAX loads of
   2.0-2.8 s that take 0.4 s one lane at a time; one at a time in all was
   slower, as the cores idle). ``load_s`` is measured with at most one build
   per core.
3. Per shape (ascending batch x sequence), each lane's cell is prepared:
   first call, warm-up, block size (a block lasts at least ``block_s``); one
   lane at a time, the others idle.
4. Turns: every prepared cell takes one block, in an order drawn at random
   per turn, after ``settle_s`` of idle time (an idle PyTorch worker's OpenMP
   threads spin for about 2 ms after its block; docs/methodology.md,
   "Interleaving"). Turns go on until every cell's stopping rule holds, or
   the set has spent its members' ``max_time_s`` together (never before
   ``min_iters`` turns). A slow minute hits every variant of the set alike,
   and a round's ratio of two of them compares them turn by turn
   (``stats.round_log_ratio``); the rounds' spread makes the interval
   (``stats.geomean_ratio_ci``).
5. Memory passes (a cell's first measured round) and rows, one lane at a
   time. Each row carries what else the machine did during the set's turns
   (``host.HostMeter``). A set whose turns found the machine busy (other
   processes and steal above ``host.BUSY_HOST`` of its CPU) is sampled again
   from scratch, up to ``busy_retakes`` times: the row keeps the last window
   and counts the retakes (``host_retakes``).

A lane whose worker dies or passes a limit is handled as the sequential
schedule handles its worker (``Runner.after_stop``): the cell in flight gets
its row, a fresh worker takes the lane's remaining cells, the set goes on
without it.
"""
from __future__ import annotations

import math
import queue
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from ...core import env, messages
from ...core.machine_load import BUSY_HOST, BUSY_PHASE, host_load
from ...plan.job import CELLS, CellRef
from ...core.messages import WorkerStop
from ...core.spec import axes, shape_text
from ...core.timing import StoppingRule


def variant_key(ref: CellRef) -> tuple:
    """What a lane holds: everything of a cell but its shape."""
    s = ref.spec
    return (s.framework, s.mode, s.dtype, s.task, *s.variant_axes)


class Lane:
    """One variant's worker process and the cells it has left."""

    def __init__(self, runner, model: str, cells: list[CellRef]):
        self.runner, self.model = runner, model
        self.remaining = {c.key: c for c in cells}
        s = cells[0].spec
        self.framework = s.framework
        kinds = [s.mode] + ([s.dtype] if s.dtype != "float32" else []) + [
            str(v) for v, axis in zip(s.variant_axes, axes(False)) if v != axis.default]
        self.name = f"{s.framework}-{'-'.join(kinds)}-{runner.model_key(model)}"
        self.worker = None
        self.busy = 0.0  # seconds this lane's requests took (its group_timeout_s budget)
        self.restarts = 0
        self.flight: str | None = None

    # -- the process ---------------------------------------------------------------
    def start(self) -> None:
        r = self.runner
        self.worker = r.study.spawn(r, r.job(CELLS, self.model, self.framework,
                                            list(self.remaining.values())), self.name)
        self.flight = None

    def wait_ready(self) -> None:
        with self.runner.phase("process start and imports"):
            self._wait(None, messages.READY, time.monotonic())

    def kill(self) -> None:
        """SIGKILL the worker without waiting for it (:meth:`close` waits)."""
        if self.worker is not None:
            self.worker.signal_kill()

    def close(self) -> None:
        """Stop the worker. Its rows are written before it says ``done``, so a
        finished worker is killed without waiting for its exit (a TensorFlow
        process takes seconds to tear down: measurements.md, "comments quoted")."""
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def stopped(self, why: str) -> None:
        """The worker stopped answering: rows for what it leaves, a fresh
        worker for the rest (Runner.after_stop decides)."""
        while True:
            self.worker.kill()
            again = self.runner.after_stop(self.worker, why, self.remaining, self.flight,
                                           self.restarts)
            if not again:
                self.worker = None
                return
            self.restarts += why != "cell_timeout"
            self.start()
            try:
                self.wait_ready()
                return
            except WorkerStop as stop:
                why = str(stop)

    # -- requests --------------------------------------------------------------------
    def cell(self, shape: tuple) -> CellRef | None:
        if self.worker is None:
            return None
        for ref in self.remaining.values():
            if ref.spec.shape == shape:
                return ref
        return None

    def ask(self, op: str, ref: CellRef, answer: str, **fields) -> dict | None:
        """Send ``op`` for ``ref`` and wait for ``answer`` (see :meth:`answer`)."""
        self.worker.send(op, cell=ref.key, **fields)
        return self.answer(ref, answer)

    def answer(self, ref: CellRef, answer: str) -> dict | None:
        """Wait for ``answer`` to a request sent for ``ref``; None when the
        cell ended instead (its row is written) or the worker stopped."""
        try:
            return self._wait(ref, answer, time.monotonic())
        except WorkerStop as stop:
            self.stopped(str(stop))
            return None

    def _wait(self, ref: CellRef | None, answer: str, t0: float) -> dict | None:
        r = self.runner
        group_limit = r.params["group_timeout_s"]
        cell_limit = r.params["cell_timeout_s"] or math.inf
        started = t0
        try:
            while True:
                try:
                    ev = self.worker.events.get(timeout=0.5)
                except queue.Empty:
                    now = time.monotonic()
                    if self.busy + now - t0 > group_limit:
                        raise WorkerStop("group_timeout")
                    if self.flight is not None and now - started > cell_limit:
                        raise WorkerStop("cell_timeout")
                    continue
                if ev is None:
                    raise WorkerStop("lost")
                kind = ev["event"]
                if kind == answer == messages.READY:
                    return ev
                key = f"{ev.get('cell')}-r{ev.get('round')}"
                if kind == messages.START:  # the variant is built: the cell's own time starts
                    r.charge("model build and gate", time.monotonic() - started)
                    self.flight, started = key, time.monotonic()
                    r.bar.set_postfix_str(ev["label"], refresh=True)
                elif kind == messages.DONE and key in self.remaining:
                    done = self.remaining.pop(key)
                    if self.flight == key:
                        self.flight = None
                    r.cell_done(done.spec, ev["status"], ev.get("median_s"), ev.get("ci"),
                                 ev.get("error", ""))
                    if ref is not None and key == ref.key:
                        return ev if answer == messages.DONE else None
                elif kind == answer and ref is not None and key == ref.key:
                    if kind == messages.PREPARED:
                        first = ev.get("first_call_s") or 0.0
                        checked = ev.get("checked_s") or 0.0  # e.g. a compiled output's
                        made = ev.get("made_s") or 0.0  # e.g. agreement steps after the first
                        r.charge("first calls and compiles", first)
                        r.charge("model build and gate", checked)
                        r.charge(r.study.first_steps_phase, made)
                        r.charge("warm-up and block size",
                                 time.monotonic() - started - first - checked - made)
                    return ev
        finally:
            self.busy += time.monotonic() - t0


@dataclass
class _Member:
    """A prepared cell of a set: its lane and what its stopping rule has seen."""

    lane: Lane
    ref: CellRef
    calls: int
    rule: StoppingRule
    samples: list[float] = field(default_factory=list)
    own_s: float = 0.0  # seconds of its own blocks
    done: bool = False
    lost: bool = False


def run_interleaved(runner, model: str, groups: list[list[CellRef]], rnd: int) -> None:
    """Every cell of ``groups`` (one model, one round) under the interleaved schedule."""
    by_variant: dict[tuple, list[CellRef]] = {}
    for group in groups:
        for ref in group:
            by_variant.setdefault(variant_key(ref), []).append(ref)
    lanes = [Lane(runner, model, cells) for cells in by_variant.values()]
    rng = np.random.default_rng([runner.params["seed"], rnd, zlib.crc32(model.encode())])
    shapes = sorted({(c.spec.batch_size * c.spec.seq_len, *c.spec.shape)
                     for cells in by_variant.values() for c in cells})
    try:
        runner.bar.set_postfix_str(f"starting {len(lanes)} workers for {model}", refresh=True)
        for lane in lanes:  # at once (forks, or imports in parallel): nothing is timed yet
            lane.start()
        for lane in lanes:
            try:
                lane.wait_ready()
            except WorkerStop as stop:
                lane.stopped(str(stop))
        _build(lanes, [s[1:] for s in shapes])
        for s in shapes:
            _run_set(runner, lanes, s[1:], rng)
    finally:
        with runner.phase("process exits"):
            for lane in lanes:  # every one told first: they exit side by side
                lane.kill()
            for lane in lanes:
                lane.close()


def _build(lanes: list[Lane], shapes: list[tuple]) -> None:
    """Every lane's variant built at once, for the first cell it will prepare."""
    asked = []
    for lane in lanes:
        ref = next((r for r in map(lane.cell, shapes) if r is not None), None)
        if ref is None:
            continue
        if len(asked) == env.default_threads():  # a core each: more only contend
            oldest, oldest_ref = asked.pop(0)
            oldest.answer(oldest_ref, messages.BUILT)
        lane.worker.send(messages.BUILD, cell=ref.key)
        asked.append((lane, ref))
    for lane, ref in asked:  # in turn: each wait charges the build time not yet charged
        lane.answer(ref, messages.BUILT)


def _run_set(runner, lanes: list[Lane], shape: tuple, rng) -> None:
    """One shape: prepare each lane's cell, sample them in turns, then memory and rows."""
    config = runner.timing
    members: list[_Member] = []
    for lane in lanes:  # one at a time: a first call is timed with the others idle
        ref = lane.cell(shape)
        if ref is None:
            continue
        ev = lane.ask(messages.PREPARE, ref, messages.PREPARED)
        if ev is not None:
            members.append(_Member(lane, ref, int(ev.get("calls_per_sample") or 1),
                                   StoppingRule(config)))
    if len(members) > 1:
        runner.bar.set_postfix_str(f"{members[0].ref.spec.model} {shape_text(shape)}: "
                                   f"{len(members)} variants interleaved", refresh=True)
    retakes, limit = 0, runner.params["busy_retakes"]
    while True:
        before = dict(runner.phases)
        runner.host.start(_pids(lanes))
        members = _turns(runner, members, rng)
        host = runner.host.stop(_pids(lanes))  # the same window for every member
        load = host_load(host["host_other_cpu"], host["host_steal"])
        if not (load > BUSY_HOST) or retakes >= limit or not members:
            break
        # The machine was busy with other work: these samples are dropped and
        # the set is sampled again (the worker drops its own at the next block).
        retakes += 1
        runner.bar.set_postfix_str(f"machine busy ({load:.0%} of the CPU went to other "
                                   f"work): sampling {shape_text(shape)} again",
                                   refresh=True)
        for phase in ("timing samples", "settle between blocks"):
            runner.recharge(phase, BUSY_PHASE, runner.phases.get(phase, 0.0)
                            - before.get(phase, 0.0))
        for m in members:
            m.samples, m.own_s, m.done, m.rule = [], 0.0, False, StoppingRule(config)
    host["host_retakes"] = retakes
    for m in members:  # memory passes one process at a time, then the rows
        with runner.phase("memory passes"):
            ok = m.lane.ask(messages.MEMORY, m.ref, messages.MEASURED)
        if ok is not None:
            with runner.phase("figures after timing"):
                m.lane.ask(messages.FINISH, m.ref, messages.DONE, host=host)


def _turns(runner, members: list[_Member], rng) -> list[_Member]:
    """Turns of one block each, in a random order per turn, until every
    member's stopping rule holds or the set's budget is spent; the members
    still answering. A member with no samples yet asks its worker to drop
    any it holds (a set sampled again)."""
    config = runner.timing
    budget = config.max_time_s * len(members)  # what sequential timing may spend at most
    settle = runner.params["settle_s"]
    spent = 0.0
    # Never fewer than min_iters turns (6 samples are the fewest with a 95% CI of the
    # median), as the sequential rule never stops before min_iters samples.
    while any(not m.done for m in members) and (
            spent < budget or any(len(m.samples) < config.min_iters for m in members)):
        for i in rng.permutation(len(members)):
            m = members[i]
            if m.lost:
                continue
            t0 = time.monotonic()
            time.sleep(settle)
            runner.charge("settle between blocks", time.monotonic() - t0)
            with runner.phase("timing samples"):
                ev = m.lane.ask(messages.SAMPLE, m.ref, messages.SAMPLED, blocks=1,
                                restart=not m.samples)
            spent += time.monotonic() - t0
            if ev is None:
                m.lost = m.done = True
                continue
            m.samples += ev["seconds"]
            m.own_s += sum(ev["seconds"]) * m.calls
            m.done = m.done or m.rule.done(m.samples, m.own_s)
        members = [m for m in members if not m.lost]
    return members


def _pids(lanes: list[Lane]) -> list[int]:
    """The run's worker processes (idle lanes too: they are not other work)."""
    return [lane.worker.proc.pid for lane in lanes if lane.worker is not None]


# The schedules' one interface (fwcompare.execution.schedules.run).
run = run_interleaved
