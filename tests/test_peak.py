"""The figures behind pct_of_peak: the FLOP estimate checked against an
independent count (PyTorch's FLOP counter on the same forward)."""
import pytest

from fwcompare.core import models


@pytest.mark.slow
@pytest.mark.parametrize("batch, seq", [(1, 32), (2, 128), (8, 512)])
def test_the_flop_estimate_agrees_with_pytorchs_flop_counter(batch, seq):
    """bert-base-cased on PyTorch's meta device, attention as plain matmuls (the counter
    sees no FLOPs in this CPU build's fused scaled_dot_product_attention):
    models.forward_flops against FlopCounterMode's count of every matmul,
    within 2% (Kaplan's attention term alone, the logits without the values,
    was 4.2% short at 8 x 512)."""
    import torch  # here, not at collection: every test process would import it
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    config = models.config_for("bert-base-cased")
    config._attn_implementation = "eager"
    with torch.device("meta"):  # shapes alone: the counter needs no values
        net = transformers.BertModel(config).eval()
        ids = torch.zeros((batch, seq), dtype=torch.long)
        mask = torch.ones((batch, seq), dtype=torch.long)  # else transformers reads the ids
    info = models.param_counts(config, sum(p.numel() for p in net.parameters()),
                               models.embedding_params(net))
    assert info["n_embedding_params"] > 20_000_000  # token, position and type tables
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        net(input_ids=ids, attention_mask=mask)
    counted = counter.get_total_flops()
    estimate = models.forward_flops(info, batch, seq)
    assert estimate == pytest.approx(counted, rel=0.02), (estimate, counted)


def test_a_precision_measured_once_keeps_its_ceiling(tmp_path, monkeypatch):
    """A later study that needs another precision probes only that one: the
    figures kept before stay, so every study of a report sees the same
    float32 ceiling (a report's mixed-precision study re-measured float32 and
    lowered it from 177 to 171 GFLOP/s for the studies after it)."""
    from fwcompare.measure import peak

    monkeypatch.setattr(peak, "CACHE", tmp_path)
    manifest = {"hostname": "h", "cpu_model": "c", "versions": {"torch": "1"}}
    first = {"framework": "torch", "device": "cpu", "threads": 2, "stream_bytes": 8,
             "flops_per_s": {"float32": 177e9}, "skipped": {}, "matmul_n": {"float32": 1024},
             "bandwidth_bytes_per_s": 40e9}
    assert peak.missing("torch", "cpu", ["bfloat16"], 2, manifest) == ["float32", "bfloat16"]
    peak.store(first, manifest)
    assert peak.missing("torch", "cpu", ["float32", "bfloat16"], 2, manifest) == ["bfloat16"]
    later = dict(first, flops_per_s={"float32": 171e9, "bfloat16": 1.3e9},
                 matmul_n={"float32": 1024, "bfloat16": 512}, bandwidth_bytes_per_s=30e9)
    kept = peak.store(later, manifest)
    assert kept["flops_per_s"] == {"float32": 177e9, "bfloat16": 1.3e9}
    assert kept["bandwidth_bytes_per_s"] == 40e9 and set(kept["measured"]) == {"float32",
                                                                               "bfloat16"}
    assert peak.missing("torch", "cpu", ["float32", "bfloat16"], 2, manifest) == []
    assert peak.missing("torch", "cpu", ["float32"], 1, manifest) == ["float32"]  # other cores
    ceil = peak.ceilings("cpu", ["float32"], 2, manifest)
    assert ceil["flops_per_s"] == {"float32": 177e9, "bfloat16": 1.3e9}
