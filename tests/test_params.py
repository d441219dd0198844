import math
import subprocess
import sys
import time

import pytest

from fwcompare.suite import params
from fwcompare import run_study
from fwcompare.core.paths import PARAMS, ROOT
from fwcompare.studies import STUDIES

GOOD = {"models": ["tiny-bert"], "batch_sizes": [1], "seq_lens": [8]}


def check(bad: dict, *fragments):
    with pytest.raises(params.ParamsError) as info:
        params.validate("inference_sweep", {**GOOD, **bad}, source="test.yaml")
    msg = str(info.value)
    for f in fragments:
        assert f in msg, msg
    return msg


def test_every_committed_params_file_is_valid():
    files = sorted(PARAMS.glob("*/*.yaml"))
    assert files
    for f in files:
        params.load_file(f)


def test_gpu_check_params_are_valid():
    """benchmarks/gpu/<study>[_suffix].yaml: the params of the GPU runs in docs/measurements.md."""
    files = sorted((ROOT / "benchmarks" / "gpu").glob("*.yaml"))
    assert files
    for f in files:
        study = next(s for s in STUDIES if f.stem.startswith(s))
        assert params.load_file(f, study)["device"] == "gpu", f


def test_defaults_are_filled_in():
    full = params.validate("inference_sweep", GOOD)
    assert full["device"] == "cpu" and full["target_rel_ci"] == 0.02


def test_unknown_key_names_the_key_and_the_closest_one():
    check({"batch_size": [2]}, "unknown key 'batch_size'", "did you mean 'batch_sizes'")


def test_wrong_type():
    check({"seq_lens": "128"}, "key 'seq_lens'", "expected list[int]")
    check({"threads": 1.5}, "key 'threads'", "expected int")
    check({"batch_sizes": [True]}, "key 'batch_sizes'")


def test_sure_extra_rounds_are_some_of_the_extra_rounds():
    check({"more_rounds": 1, "more_rounds_sure": 2}, "key 'more_rounds_sure'",
          "at most more_rounds (1), got 2")
    assert params.validate("inference_sweep", {**GOOD, "more_rounds": 2,
                                               "more_rounds_sure": 2})["more_rounds_sure"] == 2


def test_unknown_model():
    check({"models": ["bert-huge"]}, "key 'models'", "unknown model 'bert-huge'")


def test_model_path_without_checkpoint(tmp_path):
    check({"models": [str(tmp_path)]}, "key 'models'", "no config.json")


def test_unknown_framework():
    check({"frameworks": ["mxnet"]}, "key 'frameworks'", "unknown value 'mxnet'")


def test_unknown_mode():
    check({"modes": {"torch": ["xla"]}}, "key 'modes'", "unknown mode 'xla' for torch")


def test_framework_without_modes():
    check({"modes": {"torch": ["eager"]}}, "no modes given", "tensorflow")
    check({"modes": {"torch": ["eager"], "tensorflow": []}}, "no modes given", "tensorflow")
    # another *modes key may leave a framework out with an explicit empty list
    quick = params.validate("memory", params.load_file(PARAMS / "memory" / "quick.yaml"))
    assert quick["fit_modes"]["jax"] == [] and "jax" in quick["frameworks"]


def test_non_positive_sizes():
    check({"batch_sizes": [1, 0]}, "key 'batch_sizes'", "must be positive")
    check({"seq_lens": [-8]}, "key 'seq_lens'", "must be positive")
    check({"min_time_s": 0}, "key 'min_time_s'")


def test_too_few_samples_for_an_interval_are_refused():
    """A cell stopped at max_time_s with min_iters samples must have a CI:
    5 samples give none at 95% (CI ran the smoke profile so, and NaN
    intervals came out of its slow cells)."""
    from fwcompare.core.stats import fewest_for_median_ci, median_ci

    n = fewest_for_median_ci(0.95)
    assert n == 6
    assert all(map(math.isnan, median_ci(range(1, n), 0.95)[1:]))
    assert median_ci(range(1, n + 1), 0.95)[1:] == (1.0, float(n))
    check({"min_iters": n - 1}, "key 'min_iters'", f"must be at least {n}")
    params.validate("inference_sweep", {**GOOD, "min_iters": n})


def test_several_problems_are_all_listed():
    msg = check({"batch_size": [1], "device": "tpu"}, "2 problems", "batch_size", "'tpu'")
    assert msg.count("\n") >= 2


def test_bad_params_fail_before_any_measurement(tmp_path):
    out = tmp_path / "study"
    with pytest.raises(params.ParamsError):
        run_study("inference_sweep", {**GOOD, "seq_len": [8]}, output_dir=out)
    assert not out.exists()


@pytest.mark.slow
def test_cli_typo_fails_fast_naming_the_key(tmp_path):
    d = tmp_path / "inference_sweep"
    d.mkdir()
    f = d / "mine.yaml"
    f.write_text("models: [tiny-bert]\nbatch_size: [1]\n")
    # fast: the check loads no framework (what makes a run's start take seconds)
    loaded = ("import sys; print(*sorted(m for m in ('torch', 'tensorflow', 'jax') "
              "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c",
                        "import sys; from fwcompare.commands.cli import main\n"
                        f"try: sys.exit(main(['validate', {str(f)!r}]))\n"
                        f"finally: {loaded}"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert "unknown key 'batch_size'" in r.stderr
    assert r.stdout.strip() == "", f"validate imported {r.stdout.strip()}"


@pytest.mark.slow
def test_cli_validate_study_checks_that_studys_files_only():
    r = subprocess.run([sys.executable, "-m", "fwcompare", "validate", "--study", "training"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    checked = [line.split()[-1] for line in r.stdout.splitlines()]
    assert len(checked) == len(list((ROOT / "params" / "training").glob("*.yaml"))) >= 4
    assert all("/params/training/" in f for f in checked), checked


def test_report_refuses_a_bad_params_file_before_running(tmp_path, monkeypatch):
    from fwcompare.suite import report

    bad_params = tmp_path / "params"
    (bad_params / "inference_sweep").mkdir(parents=True)
    (bad_params / "inference_sweep" / "smoke.yaml").write_text("modelz: [tiny-bert]\n")
    monkeypatch.setattr(report, "PARAMS", bad_params)
    with pytest.raises(params.ParamsError, match="unknown key 'modelz'"):
        report.build("smoke", out_root=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_runners_process_names_models_without_importing_transformers():
    """Cells, heads and weight keys are named in the runner's process (a
    notebook's kernel) without importing transformers, and the zoo's
    architectures match transformers' own model_type."""
    code = ("import sys\nfrom fwcompare.core import models\nfrom fwcompare.studies import STUDIES\n"
            "keys = {models.model_key(m, 0, STUDIES[s].head(t, m))\n"
            "        for s in STUDIES for t in STUDIES[s].tasks for m in models.ZOO}\n"
            "assert len(keys) > len(models.ZOO), keys\n"
            "assert 'transformers' not in sys.modules\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    from fwcompare.core import models

    for name in models.ZOO:
        assert models.model_type(name) == models.config_for(name).model_type
    assert models.train_head("gpt2") == "causal_lm" and models.train_head("tiny-bert") == "seq_cls"


# -- typed params, checked once (issue 47) ----------------------------------------------
def test_validated_params_are_a_frozen_typed_object():
    p = params.validate("inference_sweep", GOOD)
    assert type(p) is STUDIES["inference_sweep"].params_type()
    assert p.batch_sizes == p["batch_sizes"] == [1] and p.seed == 0
    assert set(p) == set(params.schema("inference_sweep")) and len(p) == len(set(p))
    with pytest.raises(Exception):  # frozen
        p.seed = 1
    with pytest.raises(KeyError, match="no key"):
        p["scedule"]
    assert not hasattr(p, "get"), "no get with a default of its own"
    assert params.validate("inference_sweep", p) is p  # typed params pass as they are
    assert {**p}["seq_lens"] == [8] and p.to_dict() == dict(p)


def _bad_file(tmp_path, text: str):
    f = tmp_path / "inference_sweep" / "quick.yaml"
    f.parent.mkdir(exist_ok=True)
    f.write_text(text)
    with pytest.raises(params.ParamsError) as info:
        params.load_file(f)
    return f, str(info.value)


def test_a_key_written_twice_is_refused_naming_the_file_and_the_key(tmp_path):
    f, msg = _bad_file(tmp_path, "models: [tiny-bert]\nbatch_sizes: [1]\nseq_lens: [8]\n"
                                 "batch_sizes: [2, 4]\n")
    assert str(f) in msg and "'batch_sizes' is written twice (lines 2 and 4)" in msg, msg


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "{}\n"])
def test_an_empty_params_file_is_refused(tmp_path, text):
    f, msg = _bad_file(tmp_path, text)
    assert str(f) in msg and "empty" in msg, msg


def test_a_checkpoint_the_studies_cannot_feed_is_refused(tmp_path):
    """A ViT directory (no vocab_size: it takes pixels, not token ids) failed in
    every cell at run time with an AttributeError; it is refused up front."""
    vit = tmp_path / "vit"
    vit.mkdir()
    (vit / "config.json").write_text('{"model_type": "vit", "hidden_size": 64, '
                                     '"image_size": 32, "patch_size": 8}')
    (vit / "model.safetensors").write_bytes(b"")
    f, msg = _bad_file(tmp_path, f"models: [{vit}]\n")
    assert str(f) in msg and "key 'models'" in msg and "'vit'" in msg, msg
    assert "vocab_size" in msg, msg


@pytest.mark.frameworks("torch")
def test_one_validation_per_entry_in_a_quick_report(monkeypatch, tmp_path):
    """`fwcompare report --profile quick` checks each study's params once, at its
    entry; the round passes, the tasks and the runners it hands them to check
    nothing again (nothing is measured here: the runner and the notebooks are
    replaced, the notebooks being entries of their own, one check each)."""
    from fwcompare.commands import cli
    from fwcompare.suite import report
    from fwcompare.execution import runner
    from fwcompare.plan import schema

    seen = []
    real = schema.validate
    monkeypatch.setattr(schema, "validate",
                        lambda st, p, source="params": seen.append(st.name) or real(st, p, source))
    ran = []
    monkeypatch.setattr(runner.Runner, "run", lambda self, specs: ran.append(
        (self.study.name, self.task, type(self.params).__name__)))
    monkeypatch.setattr(report, "run_notebooks", lambda jobs, failures, progress: {})
    report.build("quick", out_root=tmp_path, progress=False)
    assert sorted(seen) == sorted(STUDIES), seen  # once per study
    assert {name for name, _, _ in ran} == set(STUDIES)
    assert all(kind.endswith("Params") for _, _, kind in ran)  # the typed object, carried
    seen.clear()
    assert cli.main(["run", "training", "--profile", "quick", "--set", "rounds=2", "--out",
                     str(tmp_path / "one"), "-q"]) == 0
    assert seen == ["training"]


def test_a_profiles_report_keeps_its_extra_rounds_inside_its_time_budget(tmp_path, monkeypatch):
    """The quick report hands its measuring a deadline for the extra rounds:
    its time budget (params.REPORT_BUDGET_S) from its first line, less what
    its notebooks take after it (report.after_measuring, high); `--budget`
    sets another; none with `--budget 0` or for one's own question, whose
    size the profile's budget does not know (nothing is measured here)."""
    from fwcompare.commands import cli
    from fwcompare.suite import report

    got = []

    def measuring(runs, *, until=None, **kwargs):
        got.append((until, len(runs)))
        return {}, {}
    monkeypatch.setattr(report, "run_studies", measuring)
    monkeypatch.setattr(report, "run_notebooks", lambda jobs, failures, progress: {})
    for budget, argv in ((params.REPORT_BUDGET_S["quick"], []), (300.0, ["--budget", "5"])):
        t0 = time.monotonic()
        assert cli.main(["report", "--profile", "quick", "--fresh", "--out",
                         str(tmp_path / str(budget)), *argv]) == 0
        t1 = time.monotonic()
        until, k = got.pop()
        room = budget - report.after_measuring(k)[1]
        assert k == len(STUDIES) and t0 + room <= until <= t1 + room, (until - t0, room)
    for argv in (["--budget", "0"], ["--set", "rounds=2"]):
        assert cli.main(["report", "--profile", "quick", "--fresh", "--out",
                         str(tmp_path / argv[-1]), *argv]) == 0
        assert got.pop()[0] is None, argv


def test_yaml_merge_keys_are_no_duplicates_and_the_command_line_may_fill_an_empty_file(tmp_path):
    f = tmp_path / "inference_sweep" / "mine.yaml"
    f.parent.mkdir()
    f.write_text("models: [tiny-bert]\nframeworks: [torch, jax]\n"
                 "modes: {<<: {torch: [eager]}, jax: [jit]}\n")
    assert params.load_file(f, "inference_sweep")["modes"] == {"torch": ["eager"], "jax": ["jit"]}
    f.write_text("")
    p = params.with_overrides("inference_sweep", f, {"models": ["tiny-bert"]})
    assert p["models"] == ["tiny-bert"]


def test_typed_params_of_another_process_are_checked_again():
    """A copy pickled into another process (submitit's shard jobs) has a class
    of its own: it is checked there as plain values, not refused."""
    import cloudpickle

    p = params.validate("inference_sweep", GOOD)
    copy = cloudpickle.loads(cloudpickle.dumps(p))
    again = params.validate("inference_sweep", copy)
    assert type(again) is type(p) and again == p


def test_a_frameworks_options_are_keys_of_the_studies_that_take_them():
    """A framework declares the params keys its backend takes (its options): a
    shared one is a key of every study (a study may leave it out), another
    only of a study that asks for it; a study cannot name an option nobody
    declares."""
    from fwcompare import frameworks
    from fwcompare.frameworks import Framework, Option
    from fwcompare.plan import schema

    toy = Framework(name="toyfw", modes=("plain",), options={
        "toy_fast": Option("bool", True, "the toy's fast path"),
        "toy_level": Option("int", 2, "the toy's level", (1, 2, 3), shared=False)})
    frameworks.register(toy)
    try:
        grid = schema.grid_params(["m"], {}, {}, [1], [8], 10.0)
        assert grid["toy_fast"].default is True and "toy_level" not in grid
        assert "toy_fast" not in schema.grid_params(["m"], {}, {}, [1], [8], 10.0,
                                                    toy_fast=None)
        level = schema.option_params("toy_level")["toy_level"]
        assert level.default == 2 and level.check(4) and not level.check(3)
        with pytest.raises(TypeError, match="toy_level is no framework's shared option"):
            schema.grid_params(["m"], {}, {}, [1], [8], 10.0, toy_level=1)
    finally:
        frameworks.unregister("toyfw")
    assert "toy_fast" not in schema.grid_params(["m"], {}, {}, [1], [8], 10.0)


def test_the_studies_modes_tables_know_a_framework_registered_later():
    """The modes tables are read when used: a framework registered after the
    studies were imported is in the memory study's and, declaring engines, in
    the distributed study's (its engines checked as every framework's)."""
    from fwcompare import frameworks
    from fwcompare.frameworks import Framework
    from fwcompare.studies.distributed import DIST_MODES

    toy = Framework(name="toyfw", modes=("plain",), dist_modes=("plain",),
                    dist_one_host={"plain": "keeps its ranks on this host"})
    assert "toyfw" not in DIST_MODES and "toyfw" not in STUDIES["memory"].modes
    frameworks.register(toy)
    try:
        assert DIST_MODES["toyfw"] == ("plain",) and list(DIST_MODES)[-1] == "toyfw"
        assert "checkpointing" in STUDIES["memory"].modes["toyfw"]
        with pytest.raises(params.ParamsError,
                           match="key 'modes': toyfw plain keeps its ranks on this host"):
            params.validate("distributed", {"frameworks": ["toyfw"], "modes": {"toyfw": ["plain"]},
                                            "hosts": ["a", "b"], "master_port": 29500})
    finally:
        frameworks.unregister("toyfw")
    assert "toyfw" not in DIST_MODES and "toyfw" not in STUDIES["memory"].modes
