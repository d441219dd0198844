import numpy as np
import pytest

from fwcompare.core.memory import PeakRSS, current_rss_bytes
from fwcompare.measure.error_metrics import error_metrics


def test_peak_rss_sees_a_transient_allocation():
    import mmap

    before = current_rss_bytes()
    with PeakRSS() as peak:
        # fresh pages, whatever the process's allocator keeps (an earlier test in
        # this process may have told glibc to reuse freed memory)
        block = mmap.mmap(-1, 200 * 2**20)
        for i in range(0, len(block), mmap.PAGESIZE):
            block[i] = 1  # touched: resident
        block.close()
    assert peak.method in ("cpu_rss_hwm", "cpu_rss_sampled")
    assert peak.peak_bytes - before > 180 * 2**20


def test_peak_rss_without_allocation_stays_near_baseline():
    with PeakRSS() as peak:
        pass
    assert peak.peak_bytes - current_rss_bytes() < 50 * 2**20


def test_error_metrics_hand_computed():
    ref = np.array([[3.0, 4.0]])
    out = np.array([[3.0, 4.5]])
    m = error_metrics(out, ref)
    assert m["max_abs_err"] == pytest.approx(0.5)
    assert m["rel_l2_err"] == pytest.approx(0.5 / 5.0)
    assert m["cosine_similarity"] == pytest.approx((9 + 18) / (5 * np.hypot(3, 4.5)))
    assert m["argmax_agreement"] == 1.0
    assert m["n_nonfinite"] == 0


def test_error_metrics_counts_non_finite():
    m = error_metrics(np.array([np.nan, np.inf, 1.0]), np.array([1.0, 1.0, 1.0]))
    assert (m["n_nan"], m["n_inf"], m["n_nonfinite"]) == (1, 1, 2)


def test_error_metrics_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        error_metrics(np.zeros((2, 3)), np.zeros((3, 2)))


class FakeAllocator:
    """A GPU allocator's counters as the frameworks report them: bytes in use
    and a peak that only ``reset`` (where a framework has one) brings down."""

    def __init__(self, in_use, peak=None, limit=10**9, round_to=1):
        self.in_use, self.peak, self.limit, self.round_to = in_use, peak or in_use, limit, round_to

    def alloc(self, nbytes):
        nbytes = -(-nbytes // self.round_to) * self.round_to
        if self.in_use + nbytes > self.limit:
            raise MemoryError("out of memory (fake)")
        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)
        return nbytes

    def free(self, nbytes):
        self.in_use -= nbytes

    def transient(self, nbytes):
        """A call that allocates ``nbytes`` of temporaries and frees them."""
        self.free(self.alloc(nbytes))

    def reset(self):
        self.peak = self.in_use


class Held:
    """A buffer on the fake allocator, freed when dropped."""

    def __init__(self, alloc, nbytes):
        nbytes = alloc.alloc(nbytes)  # raises first when it does not fit
        self.alloc, self.nbytes = alloc, nbytes

    def __del__(self):
        if hasattr(self, "nbytes"):  # not when the allocation failed
            self.alloc.free(self.nbytes)


def _lift(alloc, run, plan=None):
    from fwcompare.core.memory import lifted_peak

    return lifted_peak(lambda: (alloc.in_use, alloc.peak), lambda n: Held(alloc, n), run,
                       plan, "fake")


def test_a_lifted_peak_is_the_calls_own_under_an_earlier_higher_peak():
    """Loading and compiling left a peak of 5000 over 1000 bytes in use: the
    call's 300 bytes of temporaries still show (the old mark reported none)."""
    alloc = FakeAllocator(1_000, peak=5_000)
    seen = _lift(alloc, lambda: alloc.transient(300))
    assert seen == {"peak_mem_bytes": 1_300, "mem_method": "fake_peak_lifted_to_in_use"}
    assert alloc.in_use == 1_000  # the held buffer is gone
    assert _lift(alloc, lambda: None)["peak_mem_bytes"] == 1_000  # allocates nothing


def test_a_lifted_peak_is_exact_when_the_allocator_rounds_buffers():
    alloc = FakeAllocator(1_000, peak=1_777, round_to=256)
    assert _lift(alloc, lambda: alloc.transient(10))["peak_mem_bytes"] == 1_000 + 256


def test_a_peak_that_cannot_be_lifted_falls_back_to_xla_s_plan():
    """The gap to the earlier peak does not fit: bytes in use plus the
    compiled program's plan, and the row says so; without a plan, no figure
    and a method that says why (never the loading peak)."""
    alloc = FakeAllocator(1_000, peak=5_000, limit=3_000)
    seen = _lift(alloc, lambda: alloc.transient(300), plan=420)
    assert seen == {"peak_mem_bytes": 1_420,
                    "mem_method": "bytes_in_use_plus_xla_memory_analysis"}
    seen = _lift(alloc, lambda: alloc.transient(300))
    assert seen == {"peak_mem_bytes": None,
                    "mem_method": "fake_peak_not_liftable_and_no_compiled_plan"}


class FakeJaxDevice:
    def __init__(self, alloc):
        self.alloc = alloc

    def memory_stats(self):
        return {"bytes_in_use": self.alloc.in_use, "peak_bytes_in_use": self.alloc.peak}


def test_jax_gpu_memory_on_a_fake_allocator(monkeypatch):
    """The JAX backend's own glue: its device's memory_stats, its buffer,
    XLA's plan beside the figure."""
    from fwcompare.frameworks.jax import backend

    alloc = FakeAllocator(438_000, peak=1_280_000)  # from_pt-like loading peak
    monkeypatch.setattr(backend, "_device", lambda device: FakeJaxDevice(alloc))
    monkeypatch.setattr(backend, "_hold", lambda dev, n: Held(alloc, n))
    monkeypatch.setattr(backend, "memory_plan_bytes", lambda: 41_800)
    seen = backend.gpu_memory(lambda: alloc.transient(180_000))
    assert seen == {"peak_mem_bytes": 618_000, "mem_method": "jax_allocator_peak_lifted_to_in_use",
                    "xla_plan_bytes": 41_800}


@pytest.mark.frameworks("jax")
def test_jax_hold_allocates_its_buffer_without_running_a_program():
    """The lift's buffer must be the only allocation: a buffer made by a
    compiled program (``jnp.zeros``) left a 256-byte argument's peak above the
    bytes in use at every try on an H100, so no JAX cell could be lifted. On
    this CPU: the buffer has its size and no XLA program is compiled for it."""
    import jax
    import jax.monitoring

    from fwcompare.frameworks.jax import backend

    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: compiled.append(name) if "backend_compile" in name else None)
    held = backend._hold(jax.devices("cpu")[0], 123_457)
    assert held.nbytes == 123_457 and held.dtype == np.uint8
    assert compiled == []
    jax.numpy.zeros((123_459,), np.uint8).block_until_ready()  # the check itself can see a compile
    assert compiled

@pytest.mark.frameworks("torch")
def test_torch_gpu_memory_on_a_fake_allocator_adds_the_cuda_graph_pool(monkeypatch):
    """PyTorch's peak is reset before the call; a CUDA-graph replay allocates
    nothing, so its pool's reserved bytes are added (seen on an H100:
    reduce-overhead reported about the parameters alone)."""
    import torch

    from fwcompare.frameworks.torch import backend

    alloc = FakeAllocator(438_000, peak=900_000)
    snapshot = [{"segment_pool_id": (0, 0), "total_size": 600_000, "allocated_size": 438_000},
                {"segment_pool_id": (1, 7), "total_size": 200_000, "allocated_size": 30_000}]
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", alloc.reset)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: alloc.peak)
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: snapshot)
    monkeypatch.setattr(backend, "_graphs", [False])
    seen = backend.gpu_memory(lambda: alloc.transient(99_000))
    assert seen == {"peak_mem_bytes": 537_000, "mem_method": "torch_allocator_peak"}
    backend._graphs[0] = True  # a replay: no allocation, the pool holds 170_000 free
    seen = backend.gpu_memory(lambda: None)
    assert seen == {"peak_mem_bytes": 438_000 + 170_000,
                    "mem_method": "torch_allocator_peak_plus_cuda_graph_pool"}


# building a transformers model imports TensorFlow and JAX too, where they are installed
@pytest.mark.frameworks("torch", "tensorflow", "jax")
def test_torch_marks_cuda_graph_modes_only(monkeypatch):
    from fwcompare.frameworks.torch import backend

    monkeypatch.setattr(backend, "_graphs", [True])
    model = torch_tiny_model()
    fn = backend.make_forward(model, "eager", "cpu")
    fn(backend.make_inputs(np.ones((1, 4), dtype=np.int64), "cpu"))
    assert backend._graphs[0] is False
    backend._graphs[0] = True
    fn = backend.make_forward(model, "compile", "cpu", options={"torch_compile_mode": "default"})
    assert backend._graphs[0] is True  # nothing called yet


def torch_tiny_model():
    import transformers

    config = transformers.BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=16)
    return transformers.BertModel(config).eval()


def test_tensorflow_gpu_memory_on_a_fake_allocator(monkeypatch):
    import tensorflow as tf

    from fwcompare.frameworks.tensorflow import backend

    alloc = FakeAllocator(438_000, peak=2_000_000)  # building the model left a peak
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", lambda dev: alloc.reset())
    monkeypatch.setattr(tf.config.experimental, "get_memory_info",
                        lambda dev: {"current": alloc.in_use, "peak": alloc.peak})
    seen = backend.gpu_memory(lambda: alloc.transient(150_000))
    assert seen == {"peak_mem_bytes": 588_000, "mem_method": "tensorflow_allocator_peak"}


def test_jax_memory_plan_of_the_last_jitted_call():
    """XLA's plan of a real jitted call on this CPU: temporaries plus
    outputs; none after an eager call."""
    import jax.numpy as jnp

    from fwcompare.frameworks.jax import backend

    class Model:  # what make_forward reads of a Flax model
        params = {"w": jnp.ones((64, 256), jnp.float32)}

        def __call__(self, ids, params, train):
            class Out:
                last_hidden_state = jnp.tanh(params["w"][ids] @ params["w"].T)
            return Out

    ids = backend.make_inputs(np.zeros((2, 16), dtype=np.int64), "cpu")
    backend.make_forward(Model(), "jit", "cpu")(ids)
    plan = backend.memory_plan_bytes()
    # output 2 x 16 x 64 float32 = 8 KiB, plus the gathered 2 x 16 x 256 temporaries
    assert plan >= 2 * 16 * 64 * 4
    backend.make_forward(Model(), "eager", "cpu")(ids)
    assert backend.memory_plan_bytes() is None


def _gpu_cell(backend, fn):
    """One GPU cell measured by cell.measure_cell with a fake backend; its result."""
    from fwcompare.measure.cell import CellPlan, measure_cell
    from fwcompare.core.spec import RunSpec
    from fwcompare.core.timing import TimingConfig

    spec = RunSpec(study="inference_sweep", model="m", framework="jax", mode="jit",
                   device="gpu", dtype="float32", batch_size=1, seq_len=8, threads=0)
    cfg = TimingConfig(warmup_iters=1, warmup_s=0, min_iters=3, min_time_s=0, max_time_s=0.2)
    result = measure_cell(backend, "fake", "gpu", spec, CellPlan(lambda: fn, flops=1.0), cfg)
    assert result.status == "ok", result
    return dict(result.figures, status=result.status, error=result.error)


def test_a_gpu_cell_is_measured_over_one_call_after_warm_up(monkeypatch):
    """The cell's first call compiles (XLA autotuning: a peak of 5000) and a
    bigger cell ran before it; the memory pass after timing gives one call's
    peak, 1000 in use plus 700, through the JAX backend's own gpu_memory."""
    from fwcompare.frameworks.jax import backend

    alloc = FakeAllocator(1_000, peak=9_000)
    monkeypatch.setattr(backend, "_device", lambda device: FakeJaxDevice(alloc))
    monkeypatch.setattr(backend, "_hold", lambda dev, n: Held(alloc, n))
    monkeypatch.setattr(backend, "memory_plan_bytes", lambda: None)
    calls = []

    def cell():
        alloc.transient(5_000 if not calls else 700)
        calls.append(1)
    row = _gpu_cell(backend, cell)
    assert row["peak_mem_bytes"] == 1_700
    assert row["mem_method"] == "jax_allocator_peak_lifted_to_in_use"


def test_a_lifted_peak_fills_the_gap_in_several_buffers_when_the_allocator_rounds_down():
    """An allocator that hands out less than asked (a cap per buffer, say):
    the gap is filled by further buffers, and the figure stays exact."""
    alloc = FakeAllocator(1_000, peak=4_000)
    from fwcompare.core.memory import lifted_peak

    def hold(n):  # at most 1_000 bytes a buffer
        return Held(alloc, min(n, 1_000))
    seen = lifted_peak(lambda: (alloc.in_use, alloc.peak), hold,
                       lambda: alloc.transient(50), None, "fake")
    assert seen == {"peak_mem_bytes": 1_050, "mem_method": "fake_peak_lifted_to_in_use"}
