"""The machine record: the CPU's instruction-set flags and the GPUs' settings
(NVML) in env.json."""
import sys
import types

import pytest

from fwcompare.core import env

# The flags line of a Sapphire Rapids Xeon (AMX) and of a Zen 3 EPYC, cut short.
XEON = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 avx_vnni avx512_fp16 "
        "amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n")
ZEN3 = "model name\t: AMD EPYC 7763\nflags\t\t: fpu sse2 avx2 fma\n"


def test_cpu_flags_from_cpuinfo():
    assert env.cpu_flags(XEON) == dict.fromkeys(env.ISA_FLAGS, True)  # first processor's
    zen = env.cpu_flags(ZEN3)
    assert zen["avx2"] and not any(v for k, v in zen.items() if k != "avx2")
    assert env.cpu_flags("model name\t: something\n") == {}  # no flags line: nothing claimed


def test_manifest_records_flags_and_frequency():
    m = env.manifest()
    assert set(m["cpu_flags"]) == set(env.ISA_FLAGS)
    assert all(isinstance(v, bool) for v in m["cpu_flags"].values())
    assert all(v > 0 for v in m["cpu_freq_mhz"].values())


class _NVMLError(Exception):
    pass


def _fake_nvml(power_mw=700_000, app_clock=None):
    """A pynvml stand-in with one H100 whose application clocks are unsupported."""
    def unsupported(*_):
        raise _NVMLError("Not Supported")
    m = types.SimpleNamespace(
        NVMLError=_NVMLError, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "590.48",
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * 2**30),
        nvmlDeviceGetMaxClockInfo=lambda h, kind: {0: 1980, 1: 2619}[kind],
        nvmlDeviceGetApplicationsClock=(lambda h, kind: app_clock) if app_clock else unsupported,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: power_mw)
    return m


def test_gpus_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    (g,) = env.gpus()
    assert g == {"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 80 * 2**30,
                 "driver": "590.48", "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 2619,
                 "sm_clock_app_mhz": None, "mem_clock_app_mhz": None, "power_limit_w": 700.0}
    assert env.describe_gpus() == "NVIDIA H100 80GB HBM3, 80 GiB, driver 590.48, power limit 700 W"


def test_no_gpu_when_nvml_has_no_driver(monkeypatch):
    fake = _fake_nvml()

    def no_driver():
        raise _NVMLError("Driver Not Loaded")
    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert env.gpus() == []
    assert "no NVIDIA GPU" in env.describe_gpus()


@pytest.mark.skipif(not env.gpus(), reason="needs an NVIDIA GPU")
@pytest.mark.gpu
def test_a_real_gpu_has_its_limits_recorded():
    for g in env.gpus():
        assert g["name"] and g["sm_clock_max_mhz"] and g["power_limit_w"]
