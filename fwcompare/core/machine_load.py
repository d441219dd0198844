"""What else the machine did while cells were timed.

On a shared virtual machine two things take CPU from a timed cell without
showing in its own figures: processes that are not the run's (another job, a
package index build, an editor's indexer) and the hypervisor, which reports
the time it gave this machine's virtual CPUs to other guests as ``steal``.
A :class:`HostMeter` reads both around a sampling window, from the kernel's
counters (``/proc/stat`` and each process's CPU time, through psutil):

- ``host_other_cpu``: the CPU time of every process but the run's own (the
  process that drives the cells and its workers), as a share of the
  capacity of the cores the run may use over the window (1.0: every one of
  them busy all the time);
- ``host_steal``: the time the hypervisor took, as the same share.

The cores are the run's CPU affinity (every core, unless it was started
under ``taskset`` or a scheduler's CPU set): work on cores the run cannot use
takes no CPU time from its cells, and is not counted.

Their sum is a cell's ``host_load`` (:func:`host_load`); above :data:`BUSY_HOST` the scorecard
says that a verdict was measured on a busy machine. The counters advance in
clock ticks (10 ms), so a window of a few seconds resolves about 1% of the
machine. A slowdown the guest cannot see (the physical core's clock, a noisy
neighbour's cache traffic) does not show here.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

# Above this share of the machine going to other work, a timing is flagged
# (0.10 on 2 cores: a fifth of one core, on average over the window).
BUSY_HOST = 0.10


def _busy(times) -> tuple[float, float]:
    """(CPU seconds of work, CPU seconds stolen) since boot, summed over ``times``
    (psutil's per-core counters)."""
    work = sum(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
               for t in times)
    return work, sum(getattr(t, "steal", 0.0) for t in times)


def run_cores(pid: int = 0) -> list[int]:
    """The cores process ``pid`` (0: this one) may run on (its CPU affinity),
    or every core."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(pid))
    return list(range(psutil.cpu_count() or 1))


def _own_cpu(pids) -> float:
    """CPU seconds of this process, of ``pids`` and of their descendants
    (gone ones: 0)."""
    me = psutil.Process()
    total, seen = sum(me.cpu_times()[:2]), {me.pid}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs = [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
        for q in procs:
            if q.pid in seen:
                continue
            seen.add(q.pid)
            try:
                c = q.cpu_times()
            except psutil.Error:
                continue
            total += c.user + c.system
    return total


def host_load(other_cpu, steal):
    """What a timing shared the machine with: other processes' CPU plus the
    hypervisor's steal (scalars or pandas Series; NaN where not measured:
    the meter gives both figures or neither)."""
    return other_cpu + steal


@dataclass
class _Mark:
    wall: float
    work: float
    steal: float
    own: float


class HostMeter:
    """Other work and steal over the windows between :meth:`start` and
    :meth:`stop`, with ``pids`` (and their descendants) counted as the run's own.
    The process that calls it is always its own (not its other children: a
    study run from a test or a notebook has unrelated ones)."""

    def __init__(self, cpus: list[int] | None = None):
        self.cpus = list(cpus) if cpus is not None else run_cores()
        self.cores = len(self.cpus)
        self._mark: _Mark | None = None

    def _now(self, pids) -> _Mark:
        per_core = psutil.cpu_times(percpu=True)
        work, steal = _busy([per_core[c] for c in self.cpus if c < len(per_core)])
        return _Mark(time.monotonic(), work, steal, _own_cpu(pids))

    def start(self, pids=()) -> None:
        self._mark = self._now(pids)

    def stop(self, pids=()) -> dict[str, float]:
        """``host_other_cpu`` and ``host_steal`` since :meth:`start` (NaN if
        it was not started). ``pids``: the run's processes now (the same ones,
        so a process that ended in between is counted as other work)."""
        a, self._mark = self._mark, None
        if a is None:
            return {"host_other_cpu": float("nan"), "host_steal": float("nan")}
        b = self._now(pids)
        capacity = max(b.wall - a.wall, 1e-9) * self.cores
        other = (b.work - a.work) - (b.own - a.own)
        return {"host_other_cpu": min(1.0, max(0.0, other / capacity)),
                "host_steal": min(1.0, max(0.0, (b.steal - a.steal) / capacity))}


# The time breakdown's phase of samples dropped because the machine was busy
# with other work (the interleaved schedule's retakes).
BUSY_PHASE = "samples taken again (machine busy)"


def pin_threads(threads: int) -> None:
    """Give every framework the same cores: affinity first, before any import
    (thread pools started later inherit it). A process a launcher started as
    local rank ``LOCAL_RANK`` (torchrun, or fwcompare.execution.launch for TensorFlow)
    gets the next ``threads`` cores after the lower ranks', like one GPU each,
    so that ranks do not compete for the same cores."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = run_cores()
    n = max(1, min(threads, len(cores)))
    start = (int(os.environ.get("LOCAL_RANK", "0")) * threads) % len(cores)
    os.sched_setaffinity(0, (cores + cores)[start:start + n])
