"""The command line: --version, list, overrides (merged into a profile's params,
refused before anything runs when bad), where their results go, exit codes.
Exit 130 (Ctrl-C, SIGTERM) is tested where a run is stopped: test_distributed.py
and test_shard.py."""
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fwcompare
from fwcompare.commands import base, cli, listing
from fwcompare.suite import report
from fwcompare.suite.claims import load_claims
from fwcompare.core.env import ISA_FLAGS
from fwcompare.core.models import REAL, ZOO
from fwcompare.suite.params import ParamsError, command_line_overrides, overridden_profile
from fwcompare.core.paths import PARAMS, ROOT
from fwcompare.studies import STUDIES


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    # The installed package's version (pyproject.toml's), which the module repeats.
    assert capsys.readouterr().out.strip() == f"fwcompare {version('fwcompare')}"


@pytest.mark.frameworks("torch")
@pytest.mark.parametrize("what", ["studies", "profiles", "models", "claims"])
def test_list(capsys, what):
    assert cli.main(["list", what]) == cli.DONE
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    expected = {"studies": list(STUDIES),
                "profiles": sorted({f.stem for f in PARAMS.glob("*/*.yaml")}),
                "models": [*ZOO, *REAL, "PATH/"],
                "claims": [c.id for c in load_claims()]}[what]
    assert sorted(names) == sorted(expected)


def test_every_command_has_help_with_an_example(capsys):
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    assert {"run", "report", "compare", "list", "doctor"} <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit) as exc:
            cli.main([name, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        assert "example" in text and f"fwcompare {name}" in text.split("example", 1)[1], name
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "130"):  # the exit codes, documented
        assert f"\n  {code}" in top


def test_overrides_parse_lists_and_yaml_values():
    got = command_line_overrides(
        {"models": "tiny-bert,./ckpt/my-bert", "frameworks": None, "batch_sizes": "1, 8",
         "seq_lens": "128"}, ["rounds=3", "modes={torch: [eager]}", "device=gpu"])
    assert got == {"models": ["tiny-bert", str(Path("ckpt/my-bert").resolve())],
                   "batch_sizes": [1, 8],
                   "seq_lens": [128], "rounds": 3, "modes": {"torch": ["eager"]},
                   "device": "gpu"}
    with pytest.raises(ParamsError, match="given twice"):
        command_line_overrides({"batch_sizes": "2"}, ["batch_sizes=[3]"])
    with pytest.raises(ParamsError, match="KEY=VALUE"):
        command_line_overrides({}, ["rounds"])
    # The folder of a question is its own, and the same question finds it again.
    a = overridden_profile("quick", got)
    assert a.startswith("quick-") and a == overridden_profile("quick", dict(got))
    assert a != overridden_profile("quick", {**got, "rounds": 2})
    assert overridden_profile("quick", {}) == "quick"


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if anything is measured."""
    def boom(*a, **k):
        raise AssertionError("a measurement started")
    monkeypatch.setattr(fwcompare, "run_study", boom)
    monkeypatch.setattr(report, "run_studies", boom)


@pytest.mark.parametrize("argv, says", [
    (["--set", "bacth_sizes=2"], "unknown key 'bacth_sizes' (did you mean 'batch_sizes'?)"),
    (["--batch-sizes", "1,x"], "key 'batch_sizes': expected list[int]"),
    (["--batch-sizes", "0"], "key 'batch_sizes': must be positive"),
    (["--set", "rounds=three"], "key 'rounds': expected int"),
    (["--models", "no-such-bert"], "key 'models': unknown model 'no-such-bert'"),
    (["--models", "./no/such/dir"], "/no/such/dir': no such folder"),
    (["--profile", "smok"], "no profile 'smok' for study inference_sweep"),
    (["--frameworks", "torch,mxnet"], "key 'frameworks': unknown value 'mxnet'"),
    (["--set", "rounds"], "expected KEY=VALUE"),
    (["--set", "modes=[torch"], "not a YAML value"),
])
def test_bad_overrides_exit_2_before_anything_runs(capsys, tmp_path, nothing_runs, argv, says):
    rc = cli.main(["run", "inference_sweep", "--profile", "smoke", "--out", str(tmp_path / "o"),
                   *argv])
    err = capsys.readouterr().err
    assert rc == cli.BAD_INPUT, err
    assert says in err, err
    assert not (tmp_path / "o").exists()


def test_report_overrides_checked_for_every_study_before_anything_runs(capsys, tmp_path,
                                                                        nothing_runs):
    base = ["report", "--profile", "smoke", "--out", str(tmp_path), "--study", "inference_sweep",
            "--study", "generation"]
    assert cli.main([*base, "--set", "nonsense_key=1"]) == cli.BAD_INPUT
    assert "key 'nonsense_key' is in no chosen study's params" in capsys.readouterr().err
    # A key of one study goes to that study alone, and is checked there.
    assert cli.main([*base, "--set", "new_tokens=[0]"]) == cli.BAD_INPUT
    err = capsys.readouterr().err
    assert "params/generation/smoke.yaml with the command line's new_tokens=[0]: key " \
        "'new_tokens'" in err, err
    assert cli.main([*base, "--batch-sizes", "2", "--seq-lens", "-8"]) == cli.BAD_INPUT
    err = capsys.readouterr().err
    assert "params/inference_sweep/smoke.yaml" in err and "key 'seq_lens'" in err, err
    for budget in ("-5", "inf", "soon"):  # the report's time budget, in minutes
        with pytest.raises(SystemExit) as stop:
            cli.main([*base, "--budget", budget])
        assert stop.value.code == cli.BAD_INPUT
        err = capsys.readouterr().err
        assert "argument --budget: " in err and budget in err, err
    assert not any(tmp_path.iterdir())


def test_a_relative_checkpoint_path_is_taken_from_where_the_command_runs(monkeypatch,
                                                                        tmp_path):
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    got = command_line_overrides({"models": "./ckpt,tiny-bert"}, [])
    assert got["models"] == [str(tmp_path / "ckpt"), "tiny-bert"]


def test_a_runs_table_shows_the_studys_own_axes_and_why_cells_did_not_run(tmp_path,
                                                                           capsys):
    """generation's two token counts are two rows that differ in new_tokens,
    and an unsupported cell's reason is printed once under the table."""
    from fwcompare import load_results
    from fwcompare.results.store import ResultStore, make_row
    from fwcompare.core.spec import RunSpec

    store = ResultStore(tmp_path / "results", run_id="r", hostname="h")
    why = "bert has no language-model head to generate text with"
    for n in (1, 8):
        s = RunSpec(study="generation", model="tiny-gpt2", framework="torch", mode="eager",
                    device="cpu", dtype="float32", batch_size=1, seq_len=8, threads=2,
                    axes={"new_tokens": n})
        store.append(make_row(s, status="ok", run_id="r", figures={"calls_per_sample": 1}),
                     [0.01 * n] * 8)
        store.append(make_row(RunSpec.from_dict({**s.to_dict(), "model": "tiny-bert"}),
                              status="unsupported", run_id="r", error=why))
    base.print_cells(load_results(tmp_path))
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["model", "variant", "batch_size", "seq_len", "new_tokens",
                                  "status"], out
    assert sorted(ln.split()[4] for ln in out[1:5]) == ["1", "1", "8", "8"], out
    assert out[5] == f"unsupported (2 cells): {why}", out
    assert out[6] == f"results: {tmp_path / 'results'}", out


@pytest.mark.slow
def test_a_reader_that_leaves_early_ends_the_command_without_a_traceback(monkeypatch,
                                                                         capsys):
    def closed(args):
        print("a line", flush=True)
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(listing, "main", closed)
    assert cli.main(["list", "models"]) == cli.FAILED
    assert capsys.readouterr().err == ""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    p = subprocess.Popen([sys.executable, "-m", "fwcompare", "list", "studies"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.close()  # before it writes: its few lines (buffered to the end) find no reader
    assert p.wait(timeout=120) == cli.FAILED
    assert p.stderr.read() == b""  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_report_exits_1_when_a_cell_failed(monkeypatch, tmp_path, capsys):
    """The report itself goes on past a failed cell; its exit code says so."""
    import dataclasses

    from fwcompare.results.store import ResultStore, make_row
    from fwcompare.core.spec import RunSpec

    root = tmp_path / "smoke"
    store = ResultStore(root / "inference_sweep" / "results", run_id="r", hostname="h")
    s = RunSpec(study="inference_sweep", model="tiny-bert", framework="jax", mode="jit",
                device="cpu", dtype="float32", batch_size=1, seq_len=8, threads=2)
    monkeypatch.setattr(report, "build", lambda *a, **k: root / "index.html")
    argv = ["report", "--profile", "smoke", "--study", "inference_sweep"]
    store.append(make_row(s, status="ok", run_id="r", figures={"calls_per_sample": 1}),
                 [0.01] * 8)
    assert cli.main(argv) == cli.DONE
    store.append(make_row(dataclasses.replace(s, batch_size=2), status="timeout", run_id="r",
                          error="cell timed out after 900 s"))
    assert cli.main(argv) == cli.FAILED
    assert "1 cell(s) failed" in capsys.readouterr().err


def test_dry_run_with_overrides_plans_only_their_cells(capsys, tmp_path):
    rc = cli.main(["run", "inference_sweep", "--profile", "smoke", "--frameworks", "torch",
                   "--models", "tiny-bert", "--batch-sizes", "1,2,4", "--seq-lens", "8",
                   "--dry-run", "--out", str(tmp_path)])
    assert rc == cli.DONE
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "inference_sweep: 3 cells, 3 measurements over 1 round (torch 3)", out
    # then its cells, a line per variant: model, variant, precision, task, shapes, rounds
    assert out[1].split() == ["tiny-bert", "torch/eager", "float32", "inference", "1x8",
                              "2x8", "4x8,", "1", "round"], out
    assert out[2].startswith("estimate: "), out


def test_a_report_dry_run_prints_each_study_and_the_report_and_measures_nothing(
        capsys, tmp_path, nothing_runs, monkeypatch):
    from fwcompare.suite import doctor
    from fwcompare.core import env

    monkeypatch.setattr(doctor, "require", lambda *a, **k: pytest.fail("the doctor ran"))
    monkeypatch.setattr(env, "gpus", lambda: [])
    argv = ["report", "--profile", "gpu", "--study", "training", "--study", "memory",
            "--dry-run", "--out", str(tmp_path / "o")]
    assert cli.main(argv) == cli.DONE
    out = capsys.readouterr().out.splitlines()
    studies = [ln.split(":")[0] for ln in out if not ln.startswith(" ") and ": " in ln
               and " cells, " in ln]
    assert studies == ["training", "memory"], out
    assert sum(ln.startswith("estimate: ") for ln in out) == 2, out
    assert any(" gpt2  torch/plain " in ln and "up to 128x1024" in ln for ln in out), out
    assert out[-2].startswith("estimate for the report of 2 studies: "), out
    assert out[-1].startswith("this machine has no NVIDIA GPU: the real run would stop"), out
    assert not (tmp_path / "o").exists()  # nothing written, nothing archived
    # a study whose inputs have not changed since its report is said to stay as it is
    monkeypatch.setattr(report, "_unchanged", lambda *a: True)
    monkeypatch.setattr(env, "gpus", lambda: ["a GPU"])
    assert cli.main(argv) == cli.DONE
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{s}: its inputs are unchanged since its last report: not measured again "
                   "(--fresh measures it again)" for s in ("training", "memory")], out


def test_a_mapping_override_is_merged_framework_by_framework(capsys, tmp_path):
    """`--set 'modes={torch: [eager, compile]}'` (README's example) changes
    PyTorch's modes and keeps the profile's for the other frameworks."""
    from fwcompare.suite.params import merge_overrides

    assert cli.main(["run", "inference_sweep", "--profile", "smoke", "--models", "tiny-bert",
                     "--set", "modes={torch: [eager, compile]}", "--batch-sizes", "1",
                     "--seq-lens", "8", "--dry-run", "--out", str(tmp_path)]) == cli.DONE
    variants = [ln.split()[1] for ln in capsys.readouterr().out.splitlines()[1:-1]]
    assert variants == ["torch/eager", "torch/compile", "tensorflow/eager", "tensorflow/graph",
                        "jax/jit"], variants
    given = {"modes": {"torch": ["eager"], "jax": ["jit"]}, "rounds": 1}
    assert merge_overrides(given, {"modes": {"torch": ["compile"]}, "rounds": 3}) == {
        "modes": {"torch": ["compile"], "jax": ["jit"]}, "rounds": 3}
    assert given["modes"]["torch"] == ["eager"]  # the file's values are left alone


def test_a_dry_run_names_what_a_variant_runs_in_which_rounds():
    """A variant whose shapes take different rounds says so per shape; a
    study's own axes and a largest-batch search's ceiling are named."""
    from fwcompare.execution.estimate import cell_lines
    from fwcompare.plan.job import CellRef
    from fwcompare.core.spec import RunSpec
    from fwcompare.studies import STUDIES

    def spec(study, **kw):
        base = dict(study=study, model="tiny-gpt2", framework="torch", mode="eager",
                    device="cpu", dtype="float32", batch_size=1, seq_len=8, threads=1)
        return RunSpec(**{**base, **kw})

    gen = STUDIES["generation"]
    a, b = spec("generation", axes={"new_tokens": 4}), spec("generation", batch_size=2)
    lines = cell_lines(gen, {"device": "cpu"}, [CellRef(a, 0), CellRef(b, 0), CellRef(a, 1)])
    assert [ln.split() for ln in lines] == [
        ["tiny-gpt2", "torch/eager", "float32", "inference", "new_tokens=4", "1x8,", "2",
         "rounds"],
        ["tiny-gpt2", "torch/eager", "float32", "inference", "2x8,", "1", "round"]], lines
    same = spec("generation", batch_size=2, axes={"new_tokens": 4})
    lines = cell_lines(gen, {"device": "cpu"}, [CellRef(a, 0), CellRef(same, 0), CellRef(a, 1)])
    assert lines[0].endswith("new_tokens=4  1x8 (2 rounds), 2x8 (1 round)"), lines
    grid = [CellRef(spec("generation", batch_size=b, seq_len=s), 0) for b in (1, 2)
            for s in (8, 16, 32)]
    assert cell_lines(gen, {"device": "cpu"}, grid)[0].endswith(
        "inference  batch 1,2 x sequence 8,16,32, 1 round")
    assert cell_lines(gen, {"device": "cpu"}, grid[:-1])[0].endswith(  # not a whole grid
        "inference  1x8 1x16 1x32 2x8 2x16, 1 round")
    mem = STUDIES["memory"]
    search = spec("memory", task="largest_batch", batch_size=64, seq_len=32)
    assert "up to 64x32, 1 round" in cell_lines(mem, {"device": "cpu"}, [CellRef(search, 0)])[0]


def _run(args, outputs, timeout=300):
    env = {**os.environ, "FWCOMPARE_OUTPUTS": str(outputs)}
    return subprocess.run([sys.executable, "-m", "fwcompare", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.mark.slow
def test_own_question_runs_into_its_own_folder_and_records_the_cpu_flags(tmp_path):
    args = ["run", "inference_sweep", "--profile", "smoke", "--frameworks", "torch",
            "--models", "tiny-bert", "--batch-sizes", "2", "--seq-lens", "8,16"]
    p = _run(["-q", *args], tmp_path)
    assert p.returncode == cli.DONE, p.stderr
    folders = [f.name for f in tmp_path.iterdir()]
    assert len(folders) == 1 and folders[0].startswith("smoke-"), folders  # not smoke/
    res = fwcompare.load_results(tmp_path / folders[0] / "inference_sweep")
    df = res.results
    assert set(df["framework"]) == {"torch"} and set(df["model"]) == {"tiny-bert"}
    assert set(df["batch_size"]) == {2} and set(df["seq_len"]) == {8, 16}
    assert (df["status"] == "ok").all() and (df["median_s"] > 0).all()
    for said in ("estimate", "elapsed", "your own question"):  # -q: no progress lines
        assert said not in p.stdout and said not in p.stderr, said
    # env.json names the CPU's instruction-set flags, each true or false.
    flags = res.manifest["cpu_flags"]
    assert set(flags) == set(ISA_FLAGS) and all(isinstance(v, bool) for v in flags.values())
    # The same question again resumes there: nothing is measured twice.
    again = _run(args, tmp_path)
    assert again.returncode == cli.DONE, again.stderr
    assert [f.name for f in tmp_path.iterdir()] == folders
    assert len(pd.read_parquet(tmp_path / folders[0] / "inference_sweep" / "results"
                               / "results.parquet")) == len(df)


@pytest.mark.slow
def test_a_failed_cell_exits_1_naming_it(tmp_path):
    p = _run(["-q", "run", "inference_sweep", "--profile", "smoke", "--frameworks", "torch",
              "--models", "tiny-bert", "--batch-sizes", "2", "--seq-lens", "8",
              "--set", "group_timeout_s=0.5"], tmp_path)
    assert p.returncode == cli.FAILED, p.stderr
    assert "1 cell(s) failed" in p.stderr and "tiny-bert torch/eager b=2 s=8" in p.stderr
    assert "timed out" in p.stderr


@pytest.mark.slow
def test_report_with_overrides_writes_its_own_report(tmp_path):
    """`report` with overrides: the study ran with them (its rows and the
    params.yaml beside its notebook say so), in a report folder of its own."""
    import yaml

    p = _run(["-q", "report", "--profile", "smoke", "--study", "inference_sweep",
              "--frameworks", "torch,jax", "--models", "tiny-bert", "--batch-sizes", "3",
              "--seq-lens", "8"], tmp_path, timeout=600)
    assert p.returncode == cli.DONE, p.stderr[-3000:]
    (root,) = tmp_path.iterdir()
    assert root.name.startswith("smoke-") and (root / "index.html").is_file()
    study = root / "inference_sweep"
    ran = yaml.safe_load((study / "params.yaml").read_text())
    assert (ran["frameworks"], ran["models"], ran["batch_sizes"]) == (
        ["torch", "jax"], ["tiny-bert"], [3])
    assert "with the command line's overrides" in (study / "params.yaml").read_text()
    df = fwcompare.load_results(study).results
    assert set(df["framework"]) == {"torch", "jax"} and set(df["batch_size"]) == {3}
    assert (df["status"] == "ok").all()
    assert (study / "inference_sweep.html").is_file()
    assert "measuring" not in p.stderr  # -q
