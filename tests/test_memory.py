"""The memory study's pieces: the largest-batch search's next try, the
techniques' settings and params, the GPT-2 family in the zoo, and one try in
a fresh process stopped over its budget (the smoke report runs the study end
to end)."""
import math

import pytest

from fwcompare.core import models
from fwcompare.suite import params
from fwcompare.studies import STUDIES, memory


def run_search(fits, step=1, cap=512, budget=None, precision=0.0):
    """The tries ``next_batch`` asks for against a known limit: ``fits(b)`` ->
    (fits, peak bytes)."""
    tried = {}
    while (b := memory.next_batch(tried, step, cap, budget, precision)) is not None:
        assert b not in tried and b % step == 0 and 0 < b <= cap
        tried[b] = fits(b)
        assert len(tried) < 30
    ok = [b for b, (f, _) in tried.items() if f]
    bad = [b for b, (f, _) in tried.items() if not f]
    return (max(ok) if ok else 0), (min(bad) if bad else None), tried


@pytest.mark.parametrize("limit", [1, 2, 3, 17, 64, 100, 511])
def test_search_finds_a_linear_limit_in_a_few_tries(limit):
    per, base = 10.0, 100.0  # peak = base + per * batch; the budget fits ``limit``
    budget = base + per * limit + per / 2
    largest, oom, tried = run_search(lambda b: (base + per * b <= budget, base + per * b),
                                     budget=budget)
    assert (largest, oom) == (limit, limit + 1)
    assert len(tried) <= 6, tried  # step, 4 x step, x8 steps, the line's guess, its neighbour


@pytest.mark.parametrize("limit", [5, 40, 300])
def test_search_bisects_when_the_line_is_wrong(limit):
    # Peaks grow with the square of the batch: the line from the first tries
    # overshoots, and the bracket is bisected.
    budget = 1e3 + limit ** 2 + 0.5
    largest, oom, tried = run_search(lambda b: (1e3 + b ** 2 <= budget, 1e3 + b ** 2),
                                     budget=budget)
    assert (largest, oom) == (limit, limit + 1)
    assert len(tried) <= 2 + 2 * math.ceil(math.log2(limit + 2)), tried


@pytest.mark.parametrize("limit", [13, 48, 100, 300])
def test_a_search_with_a_precision_brackets_within_it_in_fewer_tries(limit):
    # Peaks that grow slower than the batch (fixed costs shared): the line
    # from small tries keeps predicting just past the largest fitting one.
    def peak(b):
        return 300.0 + 30.0 * b ** 0.8 + 3.0 * b

    budget = peak(limit) + 1e-6
    exact = run_search(lambda b: (peak(b) <= budget, peak(b)), cap=1024, budget=budget)
    largest, oom, tried = run_search(lambda b: (peak(b) <= budget, peak(b)), cap=1024,
                                     budget=budget, precision=0.25)
    assert exact[:2] == (limit, limit + 1)
    assert largest <= limit < oom <= largest + max(1, int(0.25 * largest))
    assert len(tried) < len(exact[2]), (list(tried), list(exact[2]))


def test_a_flat_stretch_of_peaks_does_not_send_the_search_8_fold_past_the_limit():
    # TensorFlow's MiniLM tries of 2026-11-25 (MB over the level before the
    # model): 610 at batch 1, 692 at 4, 689 at 8 (noise), then about 18 MB a
    # sample (741 at 11, 793 at 14, the largest that fit 0.75 GiB = 805 MB).
    # The local line (4 to 8) has no positive slope: the search grew to 64 and
    # took 9 tries.
    def peak(b):
        return {1: 610.0, 4: 692.0, 8: 689.0}.get(b, 689.0 + 18.0 * (b - 8))

    budget = 805.0
    largest, oom, tried = run_search(lambda b: (peak(b) <= budget, peak(b)), budget=budget)
    assert (largest, oom) == (14, 15)
    assert max(tried) < 32 and len(tried) <= 8, list(tried)


def test_search_in_micro_batch_steps_and_at_the_cap():
    largest, oom, _ = run_search(lambda b: (b <= 18, 50.0 + b), step=4, budget=68.5)
    assert (largest, oom) == (16, 20)  # accumulate-4 runs multiples of 4 only
    largest, oom, tried = run_search(lambda b: (True, 10.0 * b), cap=64, budget=1e9)
    assert (largest, oom) == (64, None) and 64 in tried  # every try fit: up to the cap
    largest, oom, tried = run_search(lambda b: (False, math.nan), budget=1e9)
    assert (largest, oom, list(tried)) == (0, 1, [1])  # not even the smallest batch


def test_search_without_a_budget_bisects():
    largest, oom, tried = run_search(lambda b: (b <= 37, math.nan), cap=256)
    assert (largest, oom) == (37, 38) and len(tried) <= 12


def test_techniques_make_the_same_step_another_way():
    p = params.validate("memory", {})
    st = STUDIES["memory"]
    assert st.settings(p, "torch", "plain").accumulation_steps == 1
    acc = st.settings(p, "jax", "accumulate-4")
    assert (acc.accumulation_steps, acc.checkpointing, acc.exec_mode) == (4, False, "jit")
    ckpt = st.settings(p, "tensorflow", "checkpointing")
    assert (ckpt.accumulation_steps, ckpt.checkpointing, ckpt.exec_mode) == (1, True, "graph")
    # The reference is PyTorch's plain step.
    assert st.train_settings(p).accumulation_steps == 1
    assert not st.train_settings(p).checkpointing


def test_params_are_checked_before_anything_runs():
    with pytest.raises(params.ParamsError) as e:
        params.validate("memory", {"batch_sizes": [6], "fit_budget_gib": 1e6,
                                   "modes": {"torch": ["accumulate-4"],
                                             "tensorflow": ["plain"], "jax": ["plain"]}})
    msg = str(e.value)
    assert "accumulate-4 splits a batch into 4 micro-batches; batch size(s) 6" in msg
    assert "below this machine's" in msg
    with pytest.raises(params.ParamsError, match="on a GPU the budget is the device's memory"):
        params.validate("memory", {"device": "gpu", "fit_budget_gib": 4.0,
                                   "schedule": "sequential"})
    with pytest.raises(params.ParamsError, match="one mode each|one training mode"):
        params.validate("memory", {"train_modes": {"torch": ["eager"],
                                                   "tensorflow": ["graph", "xla"],
                                                   "jax": ["jit"]}})
    with pytest.raises(params.ParamsError, match="unknown mode 'remat'"):
        params.validate("memory", {"modes": {"torch": ["remat"], "tensorflow": ["plain"],
                                             "jax": ["plain"]}})


def test_cells_are_techniques_and_one_search_per_framework_and_mode():
    p = params.validate("memory", {"models": ["tiny-bert"], "fit_models": ["tiny-bert"],
                                   "fit_max_batch": 64, "fit_seq_len": 32})
    cells = STUDIES["memory"].cells(p)
    train = [c for c in cells if c.task == "train"]
    search = [c for c in cells if c.task == memory.SEARCH]
    assert {c.mode for c in train} == set(memory.TECHNIQUES)
    assert len(search) == 3 * 2 and {c.mode for c in search} == {"forward", "plain"}
    assert all(c.batch_size == 64 and c.seq_len == 32 for c in search)
    assert len({c.cell_id for c in cells}) == len(cells)


@pytest.mark.frameworks("torch")
def test_gpt2_family_has_the_public_sizes():
    n = {}
    for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"):
        c = models.config_for(name)
        # Transformer blocks plus tied embeddings (the public checkpoints' counts).
        d, layers = c.n_embd, c.n_layer
        n[name] = layers * (12 * d * d + 13 * d) + (c.vocab_size + c.n_positions) * d + 2 * d
    assert round(n["gpt2"] / 1e6) == 124 and round(n["gpt2-medium"] / 1e6) == 355
    assert round(n["gpt2-large"] / 1e6) == 774 and round(n["gpt2-xl"] / 1e6) == 1558


@pytest.mark.slow
def test_a_try_that_allocates_without_letting_go_of_python_is_stopped_from_outside():
    # One C call that fills 2 GiB holding Python's lock (its own guard thread
    # could not run); the parent's guard kills it past a 0.25 GiB budget.
    import signal
    import subprocess
    import sys

    code = "import time; time.sleep(0.3); x = b'\\1' * (2 * 2 ** 30); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])

    class Worker:
        stop_note = ""

    w = Worker()
    w.proc = proc
    memory.OutsideGuard(w, 0.25 * memory.GIB)
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert w.stop_note.startswith("over the budget: resident memory"), w.stop_note
    over = float(w.stop_note.split("memory ")[1].split(" GiB")[0])
    assert 0.25 < over < 1.0  # stopped on the way up, far below the 2 GiB


def test_the_row_of_a_try_stopped_from_outside_names_its_budget():
    """The parent writes the row of a try its guard killed (the try wrote
    none): it carries the try's budget as the try's own rows do, and a
    technique cell's failure row gets no budget."""
    import dataclasses
    from types import SimpleNamespace

    from fwcompare.plan.job import CellRef
    from fwcompare.execution.runner import Runner

    p = params.validate("memory", {})
    cells = STUDIES["memory"].cells(p)
    search = next(c for c in cells if c.task == memory.SEARCH)
    fit = dataclasses.replace(search, task=memory.TRY, batch_size=8)  # as the search makes
    train = next(c for c in cells if c.task == "train")
    rows = []
    fake = SimpleNamespace(study=memory.STUDY, params=p,
                           record=lambda ref, status, error, figures: rows.append(figures))
    Runner.fail(fake, CellRef(fit), "oom", "stopped from outside")
    Runner.fail(fake, CellRef(train), "error", "crashed")
    assert rows == [{"budget_bytes": p["fit_budget_gib"] * memory.GIB}, {}]



HELD = """
import ctypes, sys
from fwcompare.core import memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]


class Info(ctypes.Structure):  # glibc's struct mallinfo2 (2.33 on)
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                                               "hblkhd", "usmblks", "fsmblks", "uordblks",
                                               "fordblks", "keepcost")]


libc.mallinfo2.restype = Info
took = {"reuse": memory.reuse_freed_memory, "fixed": memory.fix_mmap_threshold,
        "system": lambda: "yes"}[sys.argv[1]]()
before = libc.mallinfo2().hblkhd  # bytes in blocks that are mappings of their own
block = libc.malloc(96 << 20)  # a step's gradients, held
mapped = libc.mallinfo2().hblkhd - before
libc.free(block)
print(bool(took), mapped, memory.allocator_setup())
"""


def _held(setting: str) -> tuple[bool, int, str]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", HELD, setting], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    took, mapped, setup = out.stdout.strip().split(" ", 2)
    return took == "True", int(mapped), setup


@pytest.mark.slow
def test_glibc_keeps_freed_memory_where_pytorch_workers_ask_it_to():
    """``memory.reuse_freed_memory``: a 96 MiB block (BERT-base's largest
    gradient is 89 MB) comes from the heap, where glibc as it comes, or as
    the memory study sets it (``fix_mmap_threshold``), gives it a mapping of
    its own, returned to the system when freed and faulted in afresh next
    time. Read from glibc's own count of mapped bytes (``mallinfo2``), which
    no kernel setting changes (page faults would: transparent huge pages
    fault 2 MiB at a time). The rows say what each process set."""
    took, mapped, setup = _held("reuse")
    if not took:
        pytest.skip("this C library takes neither of glibc's thresholds")
    assert mapped == 0 and setup.startswith("glibc, freed memory reused: mmap threshold")
    took, mapped, setup = _held("system")
    assert mapped >= 96 << 20 and setup == "C library as it comes"
    took, mapped, setup = _held("fixed")
    assert took and mapped >= 96 << 20 and "65536 bytes" in setup and "own mapping" in setup


def test_pytorch_workers_on_a_cpu_reuse_freed_memory_unless_told_not_to(monkeypatch):
    """``torch_malloc: reuse`` (every study's default but the memory study's,
    which sets glibc itself before its backend is configured): the torch
    backend's ``configure`` asks glibc to reuse freed memory on a CPU only,
    and only with the key at reuse; the key is checked like any other."""
    from fwcompare.core import memory as memory_mod
    from fwcompare.frameworks import backend_options
    from fwcompare.frameworks.torch import backend
    from fwcompare.core.paths import PARAMS

    import torch

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # this process's stay
    calls = []
    monkeypatch.setattr(memory_mod, "reuse_freed_memory", lambda: calls.append(1) or "set")
    smoke = dict(params.load_file(PARAMS / "training" / "smoke.yaml"))
    assert STUDIES["training"].schema()["torch_malloc"].default == "reuse"
    assert "torch_malloc" not in STUDIES["memory"].schema()
    for overrides, device, asked in (({}, "cpu", 1), ({"torch_malloc": "system"}, "cpu", 0),
                                     ({}, "gpu", 0)):
        calls.clear()
        p = params.validate("training", {**smoke, **overrides, "device": device})
        backend.configure(1, device, backend_options(p))
        assert len(calls) == asked, (overrides, device)
    calls.clear()
    backend.configure(1, "cpu", backend_options(params.load_file(PARAMS / "memory" /
                                                                 "smoke.yaml")))
    assert calls == []  # no key: the memory study's own setting stands
    with pytest.raises(params.ParamsError, match="torch_malloc"):
        params.validate("training", {**smoke, "torch_malloc": "jemalloc"})
