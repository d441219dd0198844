"""The sequential schedule: one cell after another, a worker process per group.

Each group (``Study.groups``: the cells one process runs) goes to the study's
``run_group`` hook, by default the runner's (``Runner.run_group``: a worker,
restarted after a crash or a cell's timeout until every cell has a row). This
module says what the parent asks of that worker: each cell's steps in turn
(prepare, sample, memory pass, finish), waiting for each answer while it
watches the group's and the cell's time limits. A worker that runs its cells
on its own (a data-parallel launch) is only listened to.
"""
from __future__ import annotations

import queue
import time
from dataclasses import dataclass

from ...core import messages
from ...core.messages import WorkerStop

# The steps of one cell, as the sequential schedule asks for them: request,
# its fields, the event that answers it.
STEPS = ((messages.PREPARE, {}, messages.PREPARED),
         (messages.SAMPLE, {"until_stop": True}, messages.SAMPLED),
         (messages.MEMORY, {}, messages.MEASURED),
         (messages.FINISH, {}, messages.DONE))
# Where a request's time goes in the run's time breakdown.
PHASES = {messages.PREPARE: "model build, gate, first call and warm-up",
          messages.SAMPLE: "timing samples", messages.MEMORY: "memory passes",
          messages.FINISH: "figures after timing"}


def run(runner, model: str, groups: list, rnd: int) -> None:
    """The schedules' one interface: every group of one model in one round."""
    for group in groups:
        runner.study.run_group(runner, model, group)


@dataclass
class Flight:
    """The cell a worker is measuring: its key (None between cells), when it
    started (its time limit counts from there), and the seconds an autonomous
    worker has said it spent (``spent`` events)."""

    key: str | None = None
    started: float = 0.0
    reported: float = 0.0


def drive(runner, w, remaining: dict, deadline: float, cell_limit: float,
          flight: Flight) -> None:
    """Each remaining cell's steps, one cell after another (a worker that runs
    its cells on its own is only listened to); raises WorkerStop when the
    worker ends or a time limit passes."""
    if w.autonomous:  # it says where its time went (``spent`` events), if it can
        t0, flight.reported = time.monotonic(), 0.0
        try:
            while remaining:
                next_event(runner, w, remaining, deadline, cell_limit, None, flight)
        finally:
            runner.charge(runner.study.autonomous_phase,
                          time.monotonic() - t0 - flight.reported)
        return
    with runner.phase("process start and imports"):
        next_event(runner, w, remaining, deadline, cell_limit, messages.READY, flight)
    pids = [w.proc.pid]
    for key in list(remaining):
        host = {}  # what else the machine did while the cell was sampled (machine_load.py)
        for op, fields, answer in STEPS:
            if op == messages.SAMPLE:
                runner.host.start(pids)
            elif op == messages.FINISH:
                fields = dict(fields, host=host)
            w.send(op, cell=key, **fields)
            with runner.phase(PHASES[op]):
                kind = next_event(runner, w, remaining, deadline, cell_limit, answer, flight)
            if op == messages.SAMPLE:
                host = runner.host.stop(pids)
            if kind == messages.DONE:
                break


def next_event(runner, w, remaining: dict, deadline: float, cell_limit: float,
               answer: str | None, flight: Flight) -> str:
    """Wait for ``answer`` from the cell in flight (or a cell's ``done``),
    handling progress events; raise WorkerStop when the worker ends or a time
    limit passes. A cell is in flight from its ``start`` (its variant is
    loaded and gated by then) to its ``done``."""
    while True:
        try:
            ev = w.events.get(timeout=0.5)
        except queue.Empty:
            now = time.monotonic()
            if now > deadline:
                raise WorkerStop("group_timeout")
            if flight.key is not None and now - flight.started > cell_limit:
                raise WorkerStop("cell_timeout")
            continue
        if ev is None:
            raise WorkerStop("lost")
        key = f"{ev.get('cell')}-r{ev.get('round')}"
        kind = ev["event"]
        if kind == answer == messages.READY:
            return kind
        if kind == messages.SPENT:
            runner.charge(ev["phase"], ev["seconds"])
            flight.reported += ev["seconds"]
        elif kind == messages.START:  # the cell's time limit counts from here
            flight.key, flight.started = key, time.monotonic()
            runner.bar.set_postfix_str(ev["label"], refresh=True)
        elif kind == messages.DONE and key in remaining:
            ref = remaining.pop(key)
            if flight.key == key:
                flight.key = None
            runner.cell_done(ref.spec, ev["status"], ev.get("median_s"), ev.get("ci"),
                             ev.get("error", ""))
            return kind
        elif kind == answer and key == flight.key:
            return kind


def settle(w, grace_s: float = 15.0) -> None:
    """Wait up to ``grace_s`` for a worker or launch to end on its own (a
    served worker is told to exit first); a rank or worker stuck on its way
    out is then killed by the caller."""
    if not w.autonomous:
        w.send(messages.EXIT)
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        try:
            if w.events.get(timeout=max(0.01, end - time.monotonic())) is None:
                return
        except queue.Empty:
            return
