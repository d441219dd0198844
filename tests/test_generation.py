"""The generation study's pieces: token agreement, buckets, the decode table,
params, the zoo's generation models, and an architecture a study cannot run
(the smoke report runs every mode end to end)."""
import math

import numpy as np
import pandas as pd
import pytest

from fwcompare import frameworks, run_study
from fwcompare.core import models
from fwcompare.suite import params
from fwcompare.studies import STUDIES, generation


def test_agreement_finds_the_first_departure_and_the_margin_there():
    ref = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    margins = np.array([[0.5, 0.4, 0.3, 0.2], [0.9, 1e-6, 0.8, 0.7]])
    figures, problem = generation.agreement(ref.copy(), ref, margins)
    assert figures == {"tokens_agreed": 4.0, "ref_min_margin": 1e-6} and problem == ""
    other = ref.copy()
    other[1, 1] = 9  # row 1 departs at token 1, where PyTorch's top two nearly tie
    figures, problem = generation.agreement(other, ref, margins)
    assert figures["tokens_agreed"] == 1.0
    assert "generated token 1" in problem and "row 1: 9 vs 2" in problem and "1e-06" in problem
    other[0, 0] = 0
    assert generation.agreement(other, ref, margins)[0]["tokens_agreed"] == 0.0


def test_prompt_buckets():
    buckets = [16, 32, 64]
    assert [frameworks.bucket(p, buckets) for p in (1, 16, 17, 32, 64)] == [16, 16, 32, 32, 64]
    assert frameworks.bucket(100, buckets) == 100  # past the largest: its own length


@pytest.mark.frameworks("torch")
def test_kv_cache_size_follows_the_architecture():
    gpt2 = generation.kv_bytes_per_token(models.config_for("gpt2"))
    assert gpt2 == (2 * 12 * 12 * 64 * 4, 0)  # keys and values, 12 layers x 768 wide
    mistral = models.config_for("mistral-small")  # grouped-query: 2 of 8 heads hold K/V
    assert generation.kv_bytes_per_token(mistral) == (2 * 8 * 2 * 64 * 4, 0)
    t5 = generation.kv_bytes_per_token(models.config_for("t5-small"))
    assert t5 == (2 * 6 * 8 * 64 * 4, 2 * 6 * 8 * 64 * 4)  # self and cross attention


def test_zoo_knows_decoders_and_encoder_decoders():
    assert models.is_decoder("distilgpt2") and models.is_decoder("tiny-mistral")
    assert models.is_encoder_decoder("t5-small") and not models.is_decoder("tiny-t5")
    assert not models.is_decoder("bert-base-cased")
    assert "encoder-decoder" in models.forward_problem("tiny-t5")
    assert "generation study" in models.forward_problem("tiny-t5")
    assert models.forward_problem("tiny-gpt2") == ""
    gen = STUDIES["generation"]
    assert gen.model_problem("tiny-t5") == "" and gen.model_problem("tiny-gpt2") == ""
    assert "no language-model head" in gen.model_problem("tiny-bert")
    assert gen.head("inference", "tiny-t5") == "seq2seq_lm"


def test_cells_add_the_first_token_call_and_params_are_checked():
    p = params.validate("generation", {"models": ["tiny-gpt2"], "frameworks": ["torch"],
                                       "seq_lens": [8, 12], "new_tokens": [4]})
    cells = STUDIES["generation"].cells(p)
    assert sorted({(c.seq_len, c.new_tokens) for c in cells}) == [(8, 1), (8, 4), (12, 1), (12, 4)]
    assert len({c.cell_id for c in cells}) == len(cells) == 2 * 2 * 2  # eager, static-compile
    assert all("new=" in c.label for c in cells)
    with pytest.raises(params.ParamsError, match="new_tokens"):
        params.validate("generation", {"new_tokens": [1]})
    with pytest.raises(params.ParamsError, match="unknown mode 'graph'"):
        params.validate("generation", {"frameworks": ["tensorflow"],
                                       "modes": {"tensorflow": ["graph"]}})


def _row(variant, prompt, new, median, lo, hi, first, status="ok", **extra):
    fw, mode = variant.split("/")
    return dict(model="m", variant=variant, framework=fw, mode=mode, device="cpu",
                dtype="float32", batch_size=1, seq_len=prompt, new_tokens=new, padded_len=prompt,
                status=status, median_s=median, ci_low_s=lo, ci_high_s=hi,
                first_call_s=first, recompiles=extra.get("recompiles", math.nan),
                peak_mem_bytes=1e6, kv_cache_bytes=2e5, tokens_agreed=float(new),
                ref_min_margin=0.1, load_s=0.5, error="")


def test_generation_table_derives_decode_time_tokens_per_s_and_breakeven():
    s = pd.DataFrame([
        _row("tensorflow/eager", 32, 1, 0.10, 0.09, 0.11, 0.2),
        _row("tensorflow/eager", 32, 17, 4.10, 4.00, 4.30, 4.2),
        _row("tensorflow/xla", 32, 1, 0.02, 0.019, 0.021, 5.0, recompiles=1),
        _row("tensorflow/xla", 32, 17, 0.34, 0.33, 0.35, 10.34, recompiles=1),
        _row("jax/jit", 32, 1, 0.02, 0.019, 0.021, 3.0),
        _row("jax/jit", 32, 17, 0.50, 0.45, 0.55, 3.5, status="error"),
    ])
    t = generation.generation_table(s).set_index("variant")
    eager, xla = t.loc["tensorflow/eager"], t.loc["tensorflow/xla"]
    assert eager["decode_s_per_token"] == pytest.approx((4.10 - 0.10) / 16)
    assert eager["decode_low_s"] == pytest.approx((4.00 - 0.11) / 16)
    assert eager["decode_high_s"] == pytest.approx((4.30 - 0.09) / 16)
    assert xla["tokens_per_s"] == pytest.approx(17 / 0.34)
    assert xla["compile_s"] == pytest.approx(10.0)
    # 10 s more first call (eager's first call is 0.1 s over its steady call), saving
    # (4.0 - 0.32) / 16 s per token: 43.5 tokens.
    assert xla["breakeven_tokens"] == pytest.approx((10.0 - 0.1) / ((4.0 - 0.32) / 16))
    assert math.isnan(eager["breakeven_tokens"])
    assert t.loc["jax/jit", "status"] == "error" and math.isnan(t.loc["jax/jit", "decode_s_per_token"])


@pytest.mark.slow
def test_an_encoder_decoder_in_a_forward_study_is_unsupported_with_the_reason(tmp_path):
    """A T5 checkpoint given to the inference sweep: every cell says why,
    nothing is prepared (it used to end as errors with a cut traceback)."""
    res = run_study("inference_sweep", {"models": ["tiny-t5"], "frameworks": ["torch"],
                                        "batch_sizes": [1], "seq_lens": [8]},
                    output_dir=tmp_path, progress=False)
    df = res.results
    assert len(df) == 1 and (df["status"] == "unsupported").all()
    assert df["error"].iloc[0] == models.forward_problem("tiny-t5")
    assert "needs decoder inputs" in df["error"].iloc[0]
    assert "generation study" in df["error"].iloc[0]
