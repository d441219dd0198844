"""The messages between the parent (runner) and a worker process.

Neither side owns this module: the runner, the launcher and every worker
import it, and the parent never imports a worker's entry module.

Events (worker -> parent) are lines on the worker's stdout that start with
``EVENT_PREFIX`` followed by a JSON object with an ``event`` key; anything
else a library prints is ignored. Requests (parent -> worker) are JSON lines
on the worker's stdin with an ``op`` key. A served worker answers:

========  ===========================================  ======================
request   what the worker does                         its answer (event)
========  ===========================================  ======================
build     the cell's variant: model and gate, nothing   ``built``, or ``done``
          timed (``start`` is sent once it is built)    when the cell cannot run
prepare   the cell's model and gate (unless built),     ``prepared``, or ``done``
          first call, warm-up and block size            when the cell cannot run
sample    ``blocks`` sample blocks, or with             ``sampled`` (the new
          ``until_stop`` until the stopping rule stops  samples, converged)
          (``restart``: the samples so far dropped)
memory    the memory pass (the cell's first measured   ``measured``
          round's only: later ones answer at once)
finish    the cell's figures; its row is written       ``done``
          (``host``: figures the parent adds to it)
exit      leaves                                       (end of output)
========  ===========================================  ======================

A served worker says ``ready`` once its imports are done, before any request.
So a schedule is the parent's choice: one cell after another (sequential), or
several prepared workers asked for one block each in turn (interleaved; their
variants are built a core's worth at a time, since nothing is timed while they build).
A ``gate`` event reports the equivalence gate's errors, for the progress log.
``prepared`` carries ``first_call_s``, ``checked_s`` (the untimed checks of
the first call's output) and ``made_s`` (calls those checks made that do the
cell's own work: training's agreement steps after the first, its warm-up
calls; ``Study.first_steps_phase`` names them), so the parent can
say where a prepare's time went. A worker that runs its cells on its own (a
data-parallel launch's rank 0) sends ``spent`` events instead: ``phase`` (a
name of the run's time breakdown) and ``seconds``.
"""
from __future__ import annotations

import json
import sys
from typing import IO

EVENT_PREFIX = "@@fwcompare "

# Requests.
BUILD, PREPARE, SAMPLE, MEMORY, FINISH, EXIT = (
    "build", "prepare", "sample", "memory", "finish", "exit")
# Events.
READY, START, BUILT, PREPARED, SAMPLED, MEASURED, DONE, GATE, SPENT = (
    "ready", "start", "built", "prepared", "sampled", "measured", "done", "gate", "spent")


def emit(event: str, **fields) -> None:
    """Send an event to the parent (a worker's stdout)."""
    sys.stdout.write(EVENT_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def parse_event(line: str) -> dict | None:
    """The event in a line of a worker's output, or None. Launchers may put a
    prefix of their own before a rank's line, so the marker is searched for."""
    at = line.find(EVENT_PREFIX)
    if at < 0:
        return None
    return json.loads(line[at + len(EVENT_PREFIX):])


def send(stream: IO[str], op: str, **fields) -> None:
    """Send a request to a worker (its stdin)."""
    stream.write(json.dumps({"op": op, **fields}) + "\n")
    stream.flush()


def requests(stream: IO[str] = sys.stdin):
    """The requests a worker receives, until ``exit`` or the end of its input."""
    for line in stream:
        if not line.strip():
            continue
        req = json.loads(line)
        if req["op"] == EXIT:
            return
        yield req


class WorkerStop(Exception):
    """Parent side: why a group's worker stopped answering: group_timeout,
    cell_timeout or lost (the runner's and the interleaved schedule's)."""


# A directory of a data-parallel launch's own (fwcompare.execution.launch), for its
# processes to leave files in for each other (frameworks.tensorflow's parameter
# servers and workers: their pids, for the chief); removed with the launch.
LAUNCH_DIR_ENV = "FWCOMPARE_LAUNCH_DIR"

# A worker's or launch's own temporary directory (launch.fresh_tmpdir) starts
# so: a fork server whose parent is gone removes those of the workers it kills,
# and no other; a backend knows by it that its framework's "global" caches in
# the temporary directory would die with the worker (frameworks.torch.backend).
TMPDIR_PREFIX = "fwcompare-tmp-"
