"""Input pipelines (fwcompare.core.pipeline, each framework's ``make_pipeline``;
issue 50): every kind of every framework yields the same padded batches in
the same order, epoch after epoch (``tfdata-cache``: the same examples, in
shuffle's own order), refuses a batch larger than the data, and leaves no
worker process behind."""
import numpy as np
import psutil
import pytest

from fwcompare.frameworks import get, get_backend
from fwcompare.core.pipeline import Examples, epoch_batches, pad_rows
from fwcompare.studies.end_to_end import data

BATCH, SEQ = 16, 24


@pytest.fixture(scope="module")
def examples():
    task = data.make_task(3, 100, 10)  # 6 full batches an epoch, 4 examples dropped
    return data.tokenize(*task.train, SEQ, 1000, None, seed=5)


def test_examples_pad_order_and_refuse_what_does_not_fit(examples):
    ids, mask = examples.padded()
    assert ids.shape == (100, SEQ) and (mask.sum(axis=1) == examples.lengths).all()
    assert (ids[mask == 0] == examples.pad_id).all()
    again = Examples.from_padded(ids, mask, examples.labels)
    assert (again.tokens == examples.tokens).all() and (again.offsets == examples.offsets).all()
    a, b = examples.order(0), examples.order(1)
    assert sorted(a) == list(range(100)) and (a != b).any()
    assert (examples.order(0) == a).all()  # the same seed, the same order
    assert [len(i) for i in epoch_batches(examples, BATCH, 0)] == [BATCH] * 6
    with pytest.raises(ValueError, match="batch size 101 does not fit 100 examples"):
        examples.batches(101)
    with pytest.raises(ValueError, match="longer than seq_len 4"):
        Examples(examples.tokens, examples.offsets, examples.labels, seq_len=4)
    bad = examples.offsets.copy()
    bad[5] = bad[4] - 1
    with pytest.raises(ValueError, match="offsets must rise from 0"):
        Examples(examples.tokens, bad, examples.labels, seq_len=SEQ)
    ids2, mask2 = pad_rows([np.array([7, 8]), np.array([9])], 4, 0)
    assert ids2.tolist() == [[7, 8, 0, 0], [9, 0, 0, 0]] and mask2.sum() == 3


def reference(examples, n):
    """The first ``n`` batches every shared-order pipeline must yield."""
    ids, mask = examples.padded()
    idx = [i for e in range(3) for i in epoch_batches(examples, BATCH, e)][:n]
    return [(ids[i], mask[i], examples.labels[i]) for i in idx]


# PyTorch's DataLoader forks its workers: slow
@pytest.mark.frameworks("torch", "tensorflow", "jax")
@pytest.mark.parametrize("framework", [pytest.param("torch", marks=pytest.mark.slow),
                                       "tensorflow", "jax"])
def test_every_kind_yields_the_same_batches(examples, framework):
    backend = get_backend(framework)
    n = 14  # two epochs and a part of the third
    want = reference(examples, n)
    kinds = get(framework).pipelines
    assert "memory" in kinds and len(kinds) >= 3
    for kind in kinds:
        pipe = backend.make_pipeline(kind, examples, BATCH, "cpu")
        try:
            got = [tuple(np.asarray(t) for t in next(pipe)) for _ in range(n)]
        finally:
            pipe.close()
        assert pipe.setup, kind
        if kind == "tfdata-cache":  # shuffle's own order: an epoch draws each example once
            ids, mask = examples.padded()
            every = {(tuple(r), tuple(m), y) for r, m, y in
                     zip(ids.tolist(), mask.tolist(), examples.labels.tolist())}
            for epoch in (got[:6], got[6:12]):
                rows = [(tuple(r), tuple(m), y) for g in epoch
                        for r, m, y in zip(g[0].tolist(), g[1].tolist(), g[2].tolist())]
                assert len(set(rows)) == 96 and set(rows) <= every  # with their labels
            continue
        for (ids, mask, labels), (wi, wm, wl) in zip(got, want):
            assert (ids == wi).all() and (mask == wm).all() and (labels == wl).all(), kind


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax"])
def test_a_bad_kind_or_batch_is_refused_with_its_name(examples, framework):
    backend = get_backend(framework)
    with pytest.raises(ValueError, match="unknown .* pipeline 'no-such'; known: memory"):
        backend.make_pipeline("no-such", examples, BATCH, "cpu")
    with pytest.raises(ValueError, match="batch size 200 does not fit 100 examples"):
        backend.make_pipeline("memory", examples, 200, "cpu")


@pytest.mark.slow  # it forks DataLoader workers
def test_a_dataloader_worker_ends_with_its_pipeline(examples):
    """The worker is gone once the pipeline is closed, and nothing else of it
    is left (the runner's tests after this one count every child)."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}

    def workers():
        return [p for p in me.children(recursive=True)
                if p.is_running() and p.pid not in before]
    pipe = get_backend("torch").make_pipeline("dataloader-w1", examples, BATCH, "cpu")
    next(pipe)
    running = workers()
    assert len(running) == 1  # its worker runs
    pipe.close()
    psutil.wait_procs(running, timeout=10)
    assert workers() == []
