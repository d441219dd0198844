"""The largest-batch search over rounds (issue 48): a claim's searches take
every round, a round after the first seeded by the round before (two tries
where the limit holds), and ``largest_batch_ratio`` takes its interval from
the rounds' spread and each round's bracket, never of zero width."""
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from fwcompare.suite import params
from fwcompare.plan.job import CellRef
from fwcompare.core.paths import PARAMS
from fwcompare.core.stats import median_se_factor
from fwcompare.studies import STUDIES, memory

GIB = memory.GIB
CLAIM = SimpleNamespace(cells={"a": "torch/plain", "b": "tensorflow/plain"}, models=())


# -- the seeded search ---------------------------------------------------------------
def seeded(limit, seeds, step=1, cap=256, precision=0.0):
    """The tries ``next_batch`` asks for, seeded, against a limit that peaks
    on a line through 0 agree with (the budget fits ``limit``)."""
    budget = 1e9
    per = budget / (limit + 0.5)
    tried, order = {}, []
    while (b := memory.next_batch(tried, step, cap, budget, precision, seeds)) is not None:
        assert b not in tried and b % step == 0 and 0 < b <= cap
        tried[b] = (b <= limit, per * b if b <= limit else math.nan)
        order.append(b)
        assert len(order) < 30
    ok = [b for b, (f, _) in tried.items() if f]
    bad = [b for b, (f, _) in tried.items() if not f]
    return (max(ok) if ok else 0), (min(bad) if bad else None), order


def test_a_limit_that_holds_takes_the_two_seeds_only():
    assert seeded(70, (70, 71)) == (70, 71, [70, 71])
    assert seeded(20, (20, 21)) == (20, 21, [20, 21])
    # micro-batches of 4; a bracket within fit_precision of its largest batch
    assert seeded(70, (68, 72), step=4) == (68, 72, [68, 72])
    assert seeded(70, (64, 80), precision=0.25) == (64, 80, [64, 80])


@pytest.mark.parametrize("limit", [60, 67, 69, 71, 72, 75, 80, 90])
def test_a_limit_that_moved_is_found_from_the_seeds(limit):
    """The first try is the previous largest fitting batch; the previous
    failing one follows only where that fit (above a failure it would decide
    nothing); then steps that double until a try lands on the other side,
    and a bisection: about 2 log2 of the distance more tries."""
    largest, oom, order = seeded(limit, (70, 71))
    assert (largest, oom) == (limit, limit + 1)
    assert order[:2] == ([70, 71] if limit >= 70 else [70, limit if limit == 69 else 69])
    distance = abs(limit - 70)
    assert len(order) <= 2 + 2 * math.ceil(math.log2(distance + 1)), order


def test_seeds_from_a_search_that_found_no_limit():
    # every try fit up to the cap: the cap again; even the first step failed: that step
    assert seeded(300, (256,)) == (256, None, [256])
    assert seeded(0, (1,)) == (0, 1, [1])
    largest, oom, order = seeded(5, (1,))  # it fits now: a search as without seeds
    assert (largest, oom) == (5, 6) and order[:2] == [1, 4]


def test_the_previous_bracket_is_what_the_row_found():
    row = {"status": "ok", "largest_batch": 70.0, "oom_batch": 71.0}
    assert memory.previous_bracket(row) == (70, 71)
    assert memory.previous_bracket({**row, "oom_batch": math.nan}) == (70,)  # every try fit
    assert memory.previous_bracket({**row, "largest_batch": 0.0, "oom_batch": 1.0}) == (1,)
    assert memory.previous_bracket({**row, "status": "error"}) == ()
    assert memory.previous_bracket(None) == ()


class FakeRunner:
    """What ``search`` asks of a runner, with tries that fit below a limit
    per round (``limits``), peaks on a line that agrees, and rows kept by
    (cell id, round) as the store keeps them."""

    def __init__(self, limits: dict[int, int]):
        self.params = {"fit_budget_gib": 1.0, "fit_precision": 0.0}
        self.limits, self.rows, self.made, self.total = limits, {}, [], 0
        self.store = SimpleNamespace(row=lambda cell_id, rnd=0: self.rows.get((cell_id, rnd)))

    def run_group(self, model, group):
        (t,) = group
        b, limit = t.spec.batch_size, self.limits[t.round]
        self.made.append((t.round, b))
        fits = b <= limit
        self.rows[(t.spec.cell_id, t.round)] = {
            "status": "ok" if fits else "oom", "error": "",
            "peak_mem_bytes": GIB * b / (limit + 0.5) if fits else math.nan}

    def record(self, ref, status, note, figures):
        self.rows[(ref.spec.cell_id, ref.round)] = {"status": status, "error": note, **figures}


def search_spec():
    p = params.validate("memory", {})
    return next(c for c in STUDIES["memory"].cells(p)
                if c.task == memory.SEARCH and (c.framework, c.mode) == ("torch", "plain"))


def test_rounds_search_again_seeded_with_rows_of_their_own():
    spec = search_spec()
    runner = FakeRunner({0: 70, 1: 70, 2: 66, 4: 66})
    memory.search(runner, spec.model, CellRef(spec, 0))
    first = dict(runner.rows)
    row0 = runner.rows[(spec.cell_id, 0)]
    assert (row0["largest_batch"], row0["oom_batch"]) == (70, 71) and row0["fit_tries"] > 2
    made0 = len(runner.made)

    memory.search(runner, spec.model, CellRef(spec, 1))
    assert runner.made[made0:] == [(1, 70), (1, 71)]  # the limit held: two tries
    row1 = runner.rows[(spec.cell_id, 1)]
    assert (row1["largest_batch"], row1["oom_batch"], row1["fit_tries"]) == (70, 71, 2)
    assert "first tries: round 0's 70 and 71" in row1["error"]
    # round 1's tries are rows of their own: round 0's are as they were
    assert all(runner.rows[k] == v for k, v in first.items())
    assert {r for _, r in runner.rows} == {0, 1}

    # a resumed run reads round 1's tries back (by cell id and round): none made again
    made1 = len(runner.made)
    memory.search(runner, spec.model, CellRef(spec, 1))
    assert len(runner.made) == made1 and runner.rows[(spec.cell_id, 1)]["fit_tries"] == 2

    # the limit fell: 70 fails, 71 is not tried, and the search steps down
    memory.search(runner, spec.model, CellRef(spec, 2))
    tries2 = [b for r, b in runner.made if r == 2]
    assert tries2[0] == 70 and 71 not in tries2
    row2 = runner.rows[(spec.cell_id, 2)]
    assert (row2["largest_batch"], row2["oom_batch"]) == (66, 67)
    assert row2["fit_tries"] == len(tries2) <= 6

    # an extra round after rounds it did not take (fit_rounds) starts from the
    # latest search there was: round 2's
    memory.search(runner, spec.model, CellRef(spec, 4))
    assert [b for r, b in runner.made if r == 4][:2] == [66, 67]
    assert "first tries: round 2's 66 and 67" in runner.rows[(spec.cell_id, 4)]["error"]


class GpuRunner(FakeRunner):
    """Tries on a device of ``free`` bytes: a try's peak is its weights and
    optimizer (1 GiB) plus 1.2 GiB a sample, and it fits while that stays
    within 93% of the device (its runtime's context and fragments the rest)."""

    def __init__(self, free: float):
        super().__init__({0: 0})
        # the typed params a runner holds (MemoryParams), not a dict
        self.params = params.validate("memory", {"device": "gpu", "fit_budget_gib": 0.0,
                                                 "fit_precision": 0.1})
        self.free = free

    def run_group(self, model, group):
        (t,) = group
        b = t.spec.batch_size
        self.made.append((t.round, b))
        peak = GIB * (1 + 1.2 * b)
        fits = peak <= 0.93 * self.free
        self.rows[(t.spec.cell_id, t.round)] = {
            "status": "ok" if fits else "oom", "error": "",
            "peak_mem_bytes": peak if fits else math.nan}


@pytest.mark.parametrize("nvml", [True, False])
def test_a_gpu_search_aims_its_line_at_the_devices_free_memory(monkeypatch, nvml):
    """On a GPU (no budget of the search's own) the line through two fitting
    tries aims at 90% of the free memory NVML reports: 1, 4, 32 (growth is
    capped at 8-fold until a try fails), the line's batch and the one 10% past
    it. Without NVML the search still brackets the limit, growing and
    bisecting, in more tries."""
    import fwcompare.core.env

    free = 100 * GIB  # fits up to batch 76
    monkeypatch.setattr(fwcompare.core.env, "gpu_free_bytes", lambda: free if nvml else None)
    spec = search_spec()
    spec = type(spec)(**{**spec.__dict__, "batch_size": 128})
    runner = GpuRunner(free)
    memory.search(runner, spec.model, CellRef(spec, 0))
    row = runner.rows[(spec.cell_id, 0)]
    largest, oom = row["largest_batch"], row["oom_batch"]
    assert largest <= 76 < oom <= 1.1 * largest + 1
    assert row["budget_bytes"] != row["budget_bytes"]  # NaN: the device's, not a budget
    tries = [b for _, b in runner.made]
    if nvml:
        assert tries[:3] == [1, 4, 32] and len(tries) == 5, tries
    else:
        assert len(tries) > 5, tries


def test_every_try_compiles_cold_in_every_round(tmp_path):
    """The runner keeps a variant's compile cache for its later rounds; a
    try's peak spans its compile, so the cache is emptied before each try."""
    cache = tmp_path / "compile" / "key"
    (cache / "xla").mkdir(parents=True)
    (cache / "xla" / "program").write_text("compiled at batch 70 the round before")
    spawned = []
    runner = SimpleNamespace(compile_cache=lambda job: cache,
                             spawn_worker=lambda job, name: spawned.append(cache.exists())
                             or SimpleNamespace())
    job = SimpleNamespace(task=memory.SEARCH, device="gpu", params={"fit_budget_gib": 0.0})
    memory.STUDY.spawn(runner, job, "try")
    assert spawned == [False]  # emptied before the worker started
    train = SimpleNamespace(task="train", device="cpu", params={})
    (cache / "xla").mkdir(parents=True)
    memory.STUDY.spawn(runner, train, "train")
    assert (cache / "xla").is_dir()  # a technique's cells keep theirs


def test_the_claims_searches_take_their_rounds_and_others_one():
    """Quick params (rounds 3, fit_rounds 2, rounds_for claims):
    pytorch-oom-first's two searches (torch and tensorflow plain) search in
    rounds 0 and 1, and again in an extra round for a doubtful claim, while
    the checkpointing claim's cells take all three; a search no claim
    compares (a forward pass) in round 0 only."""
    from collections import Counter

    from fwcompare.suite.api import run_plan
    from fwcompare.suite.claims import claimed_variants

    keep = claimed_variants("memory", "cpu")
    assert {"torch/plain@largest_batch/*", "tensorflow/plain@largest_batch/*"} <= keep
    assert "tensorflow/plain" not in keep  # the searches, not every plain cell
    p = params.load_file(PARAMS / "memory" / "quick.yaml").to_dict()
    p["fit_modes"] = {**p["fit_modes"], "torch": ["plain", "forward"]}
    p = params.validate("memory", p)
    plan = run_plan("memory", p)
    planned = plan.cells
    rounds = Counter((c.spec.framework, c.spec.mode) for c in planned
                     if c.spec.task == memory.SEARCH)
    assert rounds[("torch", "plain")] == rounds[("tensorflow", "plain")] == p["fit_rounds"] == 2
    assert rounds[("torch", "forward")] == 1
    assert {c.round for c in planned if c.spec.task == memory.SEARCH} == {0, 1}
    timed = {c.round for c in planned if c.spec.task == "train" and c.spec.mode == "checkpointing"}
    assert timed == set(range(p["rounds"])) == {0, 1, 2}
    # an extra round comes after every cell's own: the searches take it too
    more = plan.with_more(1).cells
    assert {c.round for c in more if c.spec.task == memory.SEARCH} == {0, 1, 3}
    # every round, as before fit_rounds, where it is not set
    p0 = params.validate("memory", {**p.to_dict(), "fit_rounds": 0})
    planned = run_plan("memory", p0).cells
    assert {c.round for c in planned if c.spec.task == memory.SEARCH} == {0, 1, 2}


def test_fit_rounds_beyond_the_rounds_is_refused():
    with pytest.raises(ValueError, match="key 'fit_rounds': at most rounds \\(3\\), got 4"):
        params.validate("memory", {"rounds": 3, "fit_rounds": 4})
    with pytest.raises(ValueError, match="fit_rounds"):
        params.validate("memory", {"fit_rounds": -1})


# -- the claim's figure from the rounds ---------------------------------------------------
def results(limits, model="all-minilm-l6-v2"):
    """Search rows as the store keeps them: ``limits`` framework -> per round
    (largest fitting batch, smallest failing one); None: a search that failed."""
    rows = []
    for fw, rounds in limits.items():
        for r, lim in enumerate(rounds):
            largest, oom = lim or (math.nan, math.nan)
            rows.append({"task": memory.SEARCH, "status": "ok" if lim else "error",
                         "device": "cpu", "model": model, "seq_len": 64,
                         "budget_bytes": 1.0 * GIB, "framework": fw, "mode": "plain",
                         "round": r, "largest_batch": float(largest), "oom_batch": float(oom)})
    return pd.DataFrame(rows)


def ratio(df, confidence=0.95):
    return memory.largest_batch_ratio(SimpleNamespace(results=df, confidence=confidence),
                                      CLAIM, ("cpu",))


def test_one_round_at_exact_precision_is_the_bracket_never_zero_width():
    m = ratio(results({"torch": [(70, 71)], "tensorflow": [(20, 21)]}))
    assert m.value == pytest.approx(70 / 20)
    # each limit lies in [largest, oom): the ratio in [70 / 21, 71 / 20]
    assert (m.low, m.high) == (pytest.approx(70 / 21), pytest.approx(71 / 20))
    assert m.rounds == 1 and not m.forced and m.devices == {"cpu"}


def test_rounds_give_a_t_interval_widened_by_the_brackets():
    torch = [(75, 76), (70, 71), (74, 75)]
    tf = [(21, 22), (18, 19), (20, 21)]
    m = ratio(results({"torch": torch, "tensorflow": tf}))
    logs = np.log([a[0] / b[0] for a, b in zip(torch, tf)])
    # by hand: t on 2 degrees of freedom, the rounds' sd, the median's scale for 3
    half = st.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3) * median_se_factor(3)
    below = np.mean(np.log([a[0] / b[1] for a, b in zip(torch, tf)]) - logs)
    above = np.mean(np.log([a[1] / b[0] for a, b in zip(torch, tf)]) - logs)
    assert m.value == pytest.approx(math.exp(logs.mean()))
    assert m.low == pytest.approx(math.exp(logs.mean() - half + below))
    assert m.high == pytest.approx(math.exp(logs.mean() + half + above))
    assert m.low < math.exp(logs.mean() - half) and m.high > math.exp(logs.mean() + half)
    assert m.rounds == 3 and len(m.points) == 3
    assert "torch/plain 75, 70, 74; tensorflow/plain 21, 18, 20" in m.note
    # a lower confidence, a narrower interval (the t part)
    narrow = ratio(results({"torch": torch, "tensorflow": tf}), confidence=0.5)
    assert m.low < narrow.low < narrow.value < narrow.high < m.high


def test_rounds_that_agree_keep_the_bracket():
    m = ratio(results({"torch": [(70, 71)] * 2, "tensorflow": [(20, 21)] * 2}))
    assert (m.value, m.low, m.high, m.rounds) == (pytest.approx(3.5), pytest.approx(70 / 21),
                                                  pytest.approx(71 / 20), 2)


def test_a_round_either_search_lacks_is_left_out():
    m = ratio(results({"torch": [(70, 71), (72, 73), (74, 75)],
                       "tensorflow": [(20, 21), None, (20, 21)]}))
    assert m.rounds == 2 and m.value == pytest.approx(math.sqrt(70 / 20 * 74 / 20))
    assert "torch/plain 70, 74; tensorflow/plain 20, 20" in m.note


def test_searches_of_several_models_are_averaged_per_round():
    df = pd.concat([results({"torch": [(70, 71), (72, 73)], "tensorflow": [(20, 21)] * 2}),
                    results({"torch": [(30, 31)] * 2, "tensorflow": [(10, 11), (12, 13)]},
                            model="tiny-bert")], ignore_index=True)
    m = ratio(df)
    per_round = [math.sqrt(70 / 20 * 30 / 10), math.sqrt(72 / 20 * 30 / 12)]
    assert m.value == pytest.approx(math.sqrt(per_round[0] * per_round[1]))
    assert m.rounds == 2 and len(m.cells) == 2 and len(m.points) == 4


def test_gpu_searches_whose_budget_is_the_device_pair_up():
    df = results({"torch": [(70, 71), (72, 73)], "tensorflow": [(20, 21)] * 2})
    df = df.assign(budget_bytes=math.nan, device="gpu")  # a GPU try's budget: NaN
    m = memory.largest_batch_ratio(SimpleNamespace(results=df, confidence=0.95), CLAIM,
                                   ("gpu",))
    assert m.rounds == 2 and m.value == pytest.approx(math.sqrt(70 / 20 * 72 / 20))
    assert m.cells == ["all-minilm-l6-v2 s=64 the device's memory"]


def test_a_search_that_found_no_limit_is_not_measured():
    m = ratio(results({"torch": [(256, math.nan)], "tensorflow": [(20, 21)]}))
    assert m.forced == "not measured here" and "found no limit" in m.note
    assert math.isnan(m.value)


def test_tables_and_figure_have_a_row_per_round(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    df = results({"torch": [(70, 71), (75, 76)], "tensorflow": [(20, 21), (18, 19)]})
    df = df.assign(peak_mem_bytes=0.9 * GIB, fit_tries=[6, 2, 5, 4], error="")
    table = memory.largest_batch_table(df)
    assert list(table["round"]) == [0, 1, 0, 1]
    assert list(table["framework"]) == ["tensorflow"] * 2 + ["torch"] * 2
    fig = memory.largest_batch_figure(table, {})
    labels = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert {"70-75", "18-20"} <= labels  # the limits' range over rounds


def test_the_figure_of_a_gpu_search_whose_budget_is_the_device():
    """A GPU try has no budget of its own (NaN): its search is drawn, titled
    by the device's memory (on the H200 of 2026-11-30 the figure had no
    axes at all and the memory notebook failed)."""
    import matplotlib

    matplotlib.use("Agg")
    df = results({"torch": [(75, 76)] * 2, "tensorflow": [(20, 21)] * 2})
    df = df.assign(budget_bytes=math.nan, device="gpu", peak_mem_bytes=0.9 * GIB,
                   fit_tries=[7, 2, 5, 2], error="")
    fig = memory.largest_batch_figure(memory.largest_batch_table(df), {})
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [
        "all-minilm-l6-v2, sequence 64, the device's memory"]
    assert {"75", "20"} <= {t.get_text() for ax in fig.axes for t in ax.texts}


@pytest.mark.slow
def test_a_second_round_searches_again_from_the_first_rounds_bracket(tmp_path):
    """Smoke-sized, end to end (PyTorch's plain search, two rounds): round 1
    makes tries of its own, its first ones round 0's bracket, and where the
    limit holds it needs no more; started again, nothing is measured twice."""
    from conftest import children_alive

    from fwcompare import run_study

    p = params.load_file(PARAMS / "memory" / "smoke.yaml").to_dict()
    p.update(frameworks=["torch"], modes={"torch": ["plain"]}, fit_modes={"torch": ["plain"]},
             rounds=2, rounds_for="all")
    cells = [c for c in STUDIES["memory"].cells(params.validate("memory", p))
             if c.task == memory.SEARCH]
    df = run_study("memory", p, output_dir=tmp_path, progress=False, cells=cells).results
    s = df[df["task"] == memory.SEARCH].set_index("round")
    tries = df[df["task"] == memory.TRY]
    assert sorted(s.index) == [0, 1] and (s["status"] == "ok").all(), s[["status", "error"]]
    assert set(tries["status"]) == {"ok", "oom"}
    for r in (0, 1):
        assert (tries["round"] == r).sum() == s.loc[r, "fit_tries"]
    first, again = s.loc[0], tries[tries["round"] == 1].set_index("batch_size")
    assert first["largest_batch"] in again.index  # round 1's first try
    if again.loc[first["largest_batch"], "status"] == "ok":  # then round 0's failure
        assert first["oom_batch"] in again.index
    assert s.loc[1, "fit_tries"] <= 4 < s.loc[0, "fit_tries"]  # 2 where the limit held
    assert f"first tries: round 0's {first['largest_batch']:g}" in s.loc[1, "error"]
    assert not children_alive()

    again = run_study("memory", p, output_dir=tmp_path, progress=False, cells=cells).results
    assert len(again) == len(df) and set(again["timestamp"]) == set(df["timestamp"])
