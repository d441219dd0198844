"""The typed job and the messages between parent and worker."""
import dataclasses
import io

import pytest

from fwcompare.core import messages
from fwcompare.plan.job import CELLS, CellRef, Job, JobError
from fwcompare.core.spec import RunSpec
from fwcompare.core.timing import TimingConfig


def _job(**over) -> Job:
    spec = RunSpec(study="inference_sweep", model="tiny-bert", framework="torch", mode="eager",
                   device="cpu", dtype="float32", batch_size=2, seq_len=8, threads=1)
    fields = dict(kind=CELLS, study="inference_sweep", study_file="/x/inference_sweep.py",
                  task="inference", model="tiny-bert", head="base", model_key="tiny-bert-abc",
                  device="cpu", threads=1, gate_dir="/g", gate_shape=(3, 17), store_dir="/s",
                  run_id="r1", profile="smoke", timing=TimingConfig(min_iters=9),
                  params={"seed": 3, "equiv_tol": 1e-4, "modes": {"torch": ["eager"]}},
                  provenance={"git_commit": "abc"}, framework="torch",
                  cells=(CellRef(spec, 0), CellRef(spec, 1)), fp64_shapes=((2, 8),))
    return Job(**{**fields, **over})


def test_job_round_trips_through_json(tmp_path):
    job = _job()
    back = Job.read(job.write(tmp_path / "jobs" / "j.json"))
    assert back == job
    assert isinstance(back.timing, TimingConfig) and back.timing.min_iters == 9
    assert [c.round for c in back.cells] == [0, 1] and back.cells[0].spec == job.cells[0].spec
    assert back.cells[1].key == f"{job.cells[0].spec.cell_id}-r1"
    assert back.gate_shape == (3, 17) and back.fp64_shapes == ((2, 8),) and back.seed == 3
    assert back.gate_path.name == "tiny-bert-abc-inference.npz"


def test_job_cannot_change_after_it_is_made():
    job = _job()
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.threads = 2
    with pytest.raises(TypeError):
        job.params["seed"] = 4
    assert job.replace(threads=2).threads == 2 and job.threads == 1


def test_a_file_that_is_not_a_job_is_refused():
    d = _job().to_dict()
    with pytest.raises(JobError, match="unknown keys \\['thread'\\]"):
        Job.from_dict({**d, "thread": 1})
    with pytest.raises(JobError, match="missing keys \\['study'\\]"):
        Job.from_dict({k: v for k, v in d.items() if k != "study"})
    with pytest.raises(JobError, match="unknown job kind"):
        _job(kind="group")


def test_events_and_requests_round_trip(capsys):
    messages.emit(messages.DONE, cell="c", round=0, status="ok")
    line = capsys.readouterr().out
    assert messages.parse_event("[rank0]: " + line) == {"event": "done", "cell": "c",
                                                        "round": 0, "status": "ok"}
    assert messages.parse_event("a library's own output\n") is None
    stream = io.StringIO()
    messages.send(stream, messages.SAMPLE, cell="c-r0", blocks=3)
    messages.send(stream, messages.EXIT)
    messages.send(stream, messages.FINISH, cell="c-r0")  # after exit: never read
    stream.seek(0)
    assert list(messages.requests(stream)) == [{"op": "sample", "cell": "c-r0", "blocks": 3}]
