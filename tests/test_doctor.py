"""``fwcompare doctor`` on this machine (CPU only): every framework passes its
CPU checks through the backends' own calls, and the GPU is reported absent,
framework by framework; a ``device: gpu`` run stops before measuring."""
import subprocess
import sys

import pytest

from fwcompare.suite import doctor
from fwcompare import run_study
from fwcompare.suite.doctor import DoctorError, PASSED_VAR


@pytest.mark.slow  # fresh interpreters import each framework
def test_doctor_passes_the_cpu_and_reports_no_gpu_clearly():
    out = subprocess.run([sys.executable, "-m", "fwcompare", "doctor"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr  # no GPU is a finding, not a failure
    text = out.stdout
    cpu, gpu = text.split("\ndevice gpu", 1)
    for fw in ("torch", "tensorflow", "jax"):
        for check in ("import", "device", "memory"):
            line = next(l for l in cpu.splitlines() if l.split()[:2] == [fw, check])
            assert " ok " in line, line
        mem = next(l for l in cpu.splitlines() if l.split()[:2] == [fw, "memory"])
        assert "peak RSS rose" in mem, mem
        # On the GPU: the framework itself says it sees none.
        dev = next(l for l in gpu.splitlines() if l.split()[:1] == [fw] and "FAIL" in l)
        assert "gpu" in dev.lower(), dev
    assert "no NVIDIA GPU" in gpu or "no NVML" in gpu or "GiB, driver" in gpu
    assert "device: gpu runs stop before measuring" in text


def test_asked_for_the_gpu_alone_the_doctor_exits_1_where_a_framework_fails(monkeypatch,
                                                                            capsys):
    """``--device gpu``: a framework that cannot use the GPU fails the command
    (with ``all`` it is a finding, exit 0). The findings are shaped like the
    probes' that the test above gets from real interpreters."""
    def examine(frameworks, device):
        asked.append((frameworks, device))
        return {fw: [{"check": "import", "ok": True, "detail": f"{fw} imported"},
                     {"check": "device", "ok": device == "cpu", "detail": "RuntimeError: no GPU"}]
                for fw in frameworks}
    asked = []
    monkeypatch.setattr(doctor, "examine", examine)
    assert doctor.main(["--device", "gpu", "--frameworks", "jax"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "device gpu: not usable here" in out
    assert asked == [(["jax"], "gpu")]
    assert doctor.main(["--frameworks", "jax"]) == 0  # all: the CPU, then the GPU's finding
    assert asked[1:] == [(["jax"], "cpu"), (["jax"], "gpu")]


@pytest.mark.slow  # a probe interpreter
def test_a_gpu_run_stops_before_measuring_with_the_doctors_findings(tmp_path, monkeypatch):
    monkeypatch.delenv(PASSED_VAR, raising=False)
    with pytest.raises(DoctorError, match=r"device gpu: torch cannot run here") as err:
        run_study("inference_sweep", {"device": "gpu", "frameworks": ["torch"],
                                      "modes": {"torch": ["eager"]}, "schedule": "sequential"},
                  output_dir=tmp_path, progress=False)
    assert "torch.cuda.is_available() is False" in str(err.value)
    assert not any(tmp_path.iterdir())  # nothing measured, nothing written
