"""The largest-batch search (the parent side): each try a fresh process,
the next batch chosen from the tries so far, and a guard from outside the
try's process."""
from __future__ import annotations

import dataclasses
import math
import threading
import time

from ...plan.job import CellRef
from .techniques import GIB, MIB, TRY, micro_batches


class OutsideGuard:
    """The parent's backstop for a try's own :class:`BudgetGuard`. That guard
    is a thread of the try, so it runs only when the try lets go of Python's
    lock, and a library call can allocate for seconds without doing so:
    GPT-2 XL's JAX tries (the PyTorch weights read and converted) went from
    their level to tens of GB unseen, and the kernel's OOM killer ended them. From
    outside the process, every 2 ms: the try's resident memory over its level
    when it started, past the budget and a margin (so the try's own guard, if
    it can run, speaks first with the exact figure), kills the try
    (SIGKILL); the runner writes its ``oom`` row with the worker's
    ``stop_note``."""

    POLL_S = 0.002

    def __init__(self, worker, budget: float):
        self.worker, self.budget = worker, budget
        self.margin = max(128 * MIB, 0.1 * budget)
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.worker.proc.pid)
            level = proc.memory_info().rss
            while self.worker.proc.poll() is None:
                over = proc.memory_info().rss - level
                if over > self.budget + self.margin:
                    self.worker.stop_note = (
                        f"over the budget: resident memory {over / GIB:.3f} GiB above the "
                        f"try's at its start, budget {self.budget / GIB:g} GiB; the try was "
                        f"stopped from outside (SIGKILL: its own guard could not run)")
                    proc.kill()
                    return
                time.sleep(self.POLL_S)
        except psutil.NoSuchProcess:
            return


# -- the search (parent side) ---------------------------------------------------------
# On a GPU the budget is the device (fit_budget_gib 0), and no try has a budget of
# its own: the line through two fitting tries then aims at this share of the
# device's free memory before the search (NVML), what an allocator can hand out
# beside its runtime's context and fragments. Only the choice of the next try
# follows it; whether a batch fits is the try's own outcome.
GPU_AIM = 0.9
GROWTH = 8  # how far a search reaches past its largest fitting try before one fails
# A line through two fitting tries needs the lower at most this fraction of the
# upper: closer together, the allocator's noise in their peaks tilts it.
LINE_SPAN = 0.75


def next_batch(tried: dict[int, tuple[bool, float]], step: int, cap: int,
               budget: float | None = None, precision: float = 0.0,
               seeds: tuple[int, ...] = ()) -> int | None:
    """The next batch to try, or None when the limit is found: the smallest
    failing batch is the next step after the largest fitting one, or at most
    ``precision`` (a fraction) above it. ``tried``: batch -> (fits, peak
    bytes); batches are multiples of ``step`` up to ``cap``.

    ``seeds`` (a search in a round after the first: the previous round's
    largest fitting and smallest failing batch) are tried first, each unless
    the tries so far decide it (one above a failure, or below a fit): where
    the limit holds, the two confirm it and the search ends. Where it moved,
    the search steps away from them, each step twice the one before (up:
    the seeds' gap before the first; down: the first is the bracket's goal
    ``up``), until a try lands on the other side, and then bisects.

    Without seeds the first tries are ``step`` and ``4 * step``; until a try
    fails, each next one is at most ``GROWTH`` times the largest that fit;
    then a line through two fitting tries (``_predict``) predicts the limit
    from ``budget`` (bytes; None: bisection only), and the next try is that
    batch but at least the bracket's goal (``up``: a step, or ``precision``
    of the largest fitting batch) past the largest fitting one; a prediction
    at or below it asks for the batch ``up`` past it (once in a row), one
    past a known failure bisects the bracket instead."""
    ok = sorted(b for b, (fits, _) in tried.items() if fits)
    bad = sorted(b for b, (fits, _) in tried.items() if not fits)
    lo = ok[-1] if ok else 0
    hi = bad[0] if bad else cap + step
    up = max(step, int(precision * lo) // step * step)  # the bracket's goal
    if hi - lo <= up or lo >= cap:
        return None
    for b in seeds:
        if lo < b < hi:  # not decided by the tries so far
            return b
    if not tried:
        return step
    if not ok:  # every try failed, above the first step (a seed): widen downwards
        down = 2 * (bad[1] - bad[0]) if len(bad) > 1 else up
        return max(bad[0] - down, step)
    if len(ok) == 1 and len(tried) == 1:  # a base for the line, wider than 1 to 2
        return min(4 * step, cap)
    guess = _predict(tried, ok, budget)
    if guess is not None:
        guess = guess // step * step
        if not bad and guess > GROWTH * lo:
            # No failure yet and a line far out: at small batches fixed costs
            # (weights, optimizer state, compiled programs) flatten the line,
            # so grow by at most GROWTH until a try fails.
            return min(GROWTH * lo // step * step, cap)
        if lo < guess < hi:  # at least ``up`` past the largest fitting try
            return max(guess, lo + up) if lo + up < hi else guess
        # The line puts the limit here: the next batch decides, unless the
        # last two tries already walked up a step at a time (peaks too noisy
        # for a line near the budget: bisect instead).
        order = list(tried)
        walked = (len(order) >= 4 and order[-2:] == [lo - step, lo]
                  and tried[lo - step][0])
        if guess <= lo and not walked:
            return min(lo + up, cap)
    if not bad:  # no line: fits too close for one (seeds) widen upwards, others grow
        if ok[0] > LINE_SPAN * lo:
            return min(lo + 2 * (lo - ok[-2]), cap)
        return min(GROWTH * lo // step * step, cap)
    mid = (lo + hi) // 2 // step * step  # the line overshoots a failure, or a walk
    return mid if mid > lo else lo + step


def _predict(tried, ok, budget) -> int | None:
    """The largest batch a line through the largest fitting try and the
    largest one at most ``LINE_SPAN`` of it keeps under ``budget``
    (``tried[b][1]`` are their peaks): near the limit the line follows the
    local slope (a base through batch 1 carries its fixed costs and creeps
    up), yet its two points are far enough apart for the allocator's noise
    not to tilt it; no such try (a seeded search's tries a step apart), no
    line. Where that slope is not positive (small batches whose peaks the
    allocator's noise hides: a smaller batch may peak higher, and the search
    then overshoots into out-of-memory tries), the line through the smallest
    fitting try instead: its slope spans the whole range tried."""
    base = [b for b in ok[:-1] if b <= LINE_SPAN * ok[-1]]
    if not base or not budget:
        return None
    b2, p2 = ok[-1], tried[ok[-1]][1]
    for b1 in dict.fromkeys((base[-1], ok[0])):  # the local line, then the whole range
        slope = (p2 - tried[b1][1]) / (b2 - b1)
        if math.isfinite(slope) and slope > 0:
            return int(b2 + (budget - p2) // slope)
    return None


def previous_bracket(row: dict | None) -> tuple[int, ...]:
    """The seeds of a search's next round (``next_batch``): the largest
    batch its ``row`` (the previous round's search) found fitting and the
    smallest it found failing, those it found."""
    if row is None or row["status"] != "ok":
        return ()
    return tuple(int(row[k]) for k in ("largest_batch", "oom_batch") if row[k] > 0)


def device_aim(device: str | None) -> float | None:
    """What a GPU search's line aims at (``GPU_AIM`` of the device's free
    memory, bytes), or None: on a CPU, or where NVML cannot tell (the search
    then grows and bisects without a line)."""
    if device != "gpu":
        return None
    from ...core.env import gpu_free_bytes

    free = gpu_free_bytes()
    return GPU_AIM * free if free else None


def search(runner, model: str, ref: CellRef) -> None:
    """One largest-batch search: tries (fresh processes, rows of their own,
    task ``fit``, in the search's round) until the limit is bracketed, then
    the search's row. In a round after the first, the previous search's
    bracket seeds it (``next_batch``): a limit that holds costs two tries,
    and the rounds' limits give the figure its spread between processes. A
    try a resumed run already made is read back, not made again."""
    spec = ref.spec
    step, cap = micro_batches(spec.mode), spec.batch_size
    budget = runner.params["fit_budget_gib"] * GIB or None
    aim = budget or device_aim(runner.params["device"])
    precision = runner.params["fit_precision"]
    # the latest search before this one (an extra round for a doubtful claim
    # may come after rounds the search did not take: fit_rounds)
    seed_round, seed_row = next(((r, row) for r in range(ref.round - 1, -1, -1)
                                 if (row := runner.store.row(spec.cell_id, r)) is not None),
                                (None, None))
    seeds = previous_bracket(seed_row)
    tried: dict[int, tuple[bool, float]] = {}
    rows: dict[int, dict] = {}
    while (b := next_batch(tried, step, cap, aim, precision, seeds)) is not None:
        t = CellRef(dataclasses.replace(spec, task=TRY, batch_size=b), ref.round)
        row = runner.store.row(t.spec.cell_id, t.round)
        if row is None or row["status"] not in ("ok", "oom"):
            runner.total += 1  # each try is a cell of its own in the progress
            runner.run_group(model, [t])
            row = runner.store.row(t.spec.cell_id, t.round) or {"status": "error",
                                                               "error": "no row"}
        if row["status"] not in ("ok", "oom"):  # a try that failed otherwise ends the search
            status = "unsupported" if row["status"] == "unsupported" else "error"
            _finish(runner, ref, status, f"the try at batch {b}: {row['status']}: "
                                         f"{row['error']}", {})
            return
        rows[b] = row
        tried[b] = (row["status"] == "ok", float(row.get("peak_mem_bytes", math.nan)))
    ok = sorted(b for b, (fits, _) in tried.items() if fits)
    bad = sorted(b for b, (fits, _) in tried.items() if not fits)
    largest = ok[-1] if ok else 0
    figures = dict(largest_batch=largest, oom_batch=bad[0] if bad else math.nan,
                   fit_tries=len(tried), budget_bytes=budget or math.nan)
    if ok:
        best = rows[largest]
        figures.update({k: best.get(k) for k in ("peak_mem_bytes", "median_s", "first_call_s",
                                                 "load_s", "flops_per_call",
                                                 "achieved_flops_per_s", "bytes_per_call")})
    note = (f"largest batch {largest}" + (f", batch {bad[0]} out of memory" if bad else
                                          f": every try fit, up to fit_max_batch {cap}")
            if ok else f"even batch {step} does not fit") + (
        f" (first tries: round {seed_round}'s {' and '.join(map(str, seeds))})"
        if seeds else "")
    _finish(runner, ref, "ok", note, figures)  # the note stays on the row


def _finish(runner, ref: CellRef, status: str, note: str, figures: dict) -> None:
    """The search's row; its line in the progress."""
    runner.record(ref, status, note, figures)
