"""The rounds after the first load their compiled programs from round 0's
caches: JAX's and TensorFlow's persistent XLA caches, set by the runner
(``launch.use_compile_cache``) and read by each backend's ``configure`` after
the framework was imported, as in a worker forked from its server; and
inductor's precompiled headers, which it keeps outside its cache directory."""
import os
import subprocess
import sys

import pytest

from fwcompare.execution.launch import fresh_compile_cache, use_compile_cache
from fwcompare.core.paths import ROOT
from fwcompare.core.messages import TMPDIR_PREFIX

PROGRAM = {
    "jax": """
import jax, jax.numpy as jnp
hits = []
jax.monitoring.register_event_listener(
    lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
from fwcompare.frameworks.jax import backend
backend.configure(1, "cpu")
f = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
f(jnp.ones((64, 64))).block_until_ready()
print("hits", len(hits))
""",
    "tensorflow": """
import tensorflow as tf
from fwcompare.frameworks.tensorflow import backend
backend.configure(1, "cpu")
f = tf.function(lambda a: tf.tanh(a @ a) @ a, jit_compile=True)
print(float(f(tf.ones((64, 64)))[0, 0]))
""",
}


def _run(framework: str, env: dict) -> str:
    r = subprocess.run([sys.executable, "-c", PROGRAM[framework]], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_a_kept_cache_holds_xla_programs_for_the_next_round(tmp_path, framework):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    use_compile_cache(env, tmp_path, xla=True)
    first = _run(framework, env)
    written = list((tmp_path / "xla" / framework).iterdir())
    assert written, "round 0 wrote no compiled program"
    if framework == "jax":  # the next round's process loads them instead of compiling
        assert "hits 0" in first
        hits = int(_run(framework, env).split("hits")[1])
        assert hits >= 1


def test_a_fresh_cache_leaves_the_xla_caches_off():
    env = {"FWCOMPARE_XLA_CACHE": "/elsewhere", "JAX_COMPILATION_CACHE_DIR": "/elsewhere"}
    cache = fresh_compile_cache(env)
    os.rmdir(cache)
    assert "FWCOMPARE_XLA_CACHE" not in env and "JAX_COMPILATION_CACHE_DIR" not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == cache


# A worker forked from a fork server that made inductor's machine checks first
# (forkserver_main._warm), under the server's temporary directory.
TORCH_PROGRAM = """
import os, sys, tempfile
import torch
from torch._inductor import cpu_vec_isa
from fwcompare.commands.forkserver_main import _warm
from fwcompare.frameworks.torch import backend
tempfile.tempdir = sys.argv[1]  # the server's
_warm("torch")  # through the backend contract, as the server calls it
print("isa kept", cpu_vec_isa.valid_vec_isa_list.cache_info().currsize)
tempfile.tempdir = None  # the worker's TMPDIR, as forkserver_main._child sets it
backend.configure(1, "cpu")
f = torch.compile(lambda a: torch.tanh(a @ a) + a)
f(torch.ones(16, 16))
print("headers", os.path.realpath(os.path.join(tempfile.gettempdir(),
      "torchinductor_" + __import__("getpass").getuser())))
"""


def _worker_env(tmp_path, name: str) -> dict:
    """A worker's environment as the runner makes it: its own TMPDIR
    (launch.fresh_tmpdir, under ``tmp_path`` here) and a kept compile cache."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    use_compile_cache(env, tmp_path / "cache")
    env["TMPDIR"] = str(tmp_path / f"{TMPDIR_PREFIX}{name}")
    os.mkdir(env["TMPDIR"])
    return env


@pytest.mark.slow
def test_inductors_precompiled_headers_outlive_the_worker_in_its_compile_cache(tmp_path):
    """A worker's torch.compile writes inductor's "global" precompiled headers
    into the compile cache the next round's worker reads, not into its own
    temporary directory, which goes with it, nor into its server's, where the
    server's check of the machine's instruction sets first imported inductor's
    cache module (and kept the check's answer for the worker)."""
    server = tmp_path / "server-tmp"
    server.mkdir()
    r = subprocess.run([sys.executable, "-c", TORCH_PROGRAM, str(server)],
                       env=_worker_env(tmp_path, "r0"), cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "isa kept 1" in r.stdout
    assert not list(server.rglob("*.gch"))
    kept = tmp_path / "cache" / "inductor-globals"
    assert r.stdout.split("headers")[1].strip() == str(kept)
    assert list((kept / "precompiled_headers").glob("*.gch")), "no header was precompiled there"


def test_a_worker_that_compiles_has_its_server_make_the_compiler_checks_first():
    """The fork request's ``compiles`` (runner.compiles): a cell whose mode
    compiles device code (torch.compile, the static-cache compile, XLA), not
    eager, TorchScript's host trace or tf.function's graph."""
    from types import SimpleNamespace as NS

    from fwcompare.execution.runner import compiles

    def job(framework, *modes):
        return NS(framework=framework, cells=[NS(spec=NS(mode=m)) for m in modes])
    assert compiles(job("torch", "eager", "compile")) and compiles(job("torch", "static-compile"))
    assert not compiles(job("torch", "eager", "torchscript"))
    assert compiles(job("tensorflow", "xla")) and not compiles(job("tensorflow", "graph"))
    assert compiles(job("jax", "jit")) and not compiles(job("nosuch", "compile"))


@pytest.mark.frameworks("torch")
def test_keep_inductor_globals_links_only_a_workers_own_temporary_directory(tmp_path, monkeypatch):
    import tempfile

    from fwcompare.frameworks.torch.backend import keep_inductor_globals

    env = _worker_env(tmp_path, "w")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", env["TORCHINDUCTOR_CACHE_DIR"])
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    link = keep_inductor_globals()
    assert link is not None and os.path.islink(link)
    assert os.path.realpath(link) == str(tmp_path / "cache" / "inductor-globals")
    assert keep_inductor_globals() is None  # already there: left as it is

    other = tmp_path / "someones-tmp"  # a temporary directory that is not a worker's own
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(other))
    assert keep_inductor_globals() is None and not any(other.iterdir())
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")  # no compile cache: nothing to follow
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / f"{TMPDIR_PREFIX}x"))
    assert keep_inductor_globals() is None


def test_keep_inductor_globals_with_a_relative_cache_and_a_rank_that_linked_first(
        tmp_path, monkeypatch):
    import tempfile

    from fwcompare.frameworks.torch.backend import keep_inductor_globals

    env = _worker_env(tmp_path, "w")
    monkeypatch.chdir(tmp_path)  # `run --out myrun`: the cache named from the worker's cwd
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "cache")
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    link = keep_inductor_globals()
    assert os.path.realpath(link) == str(tmp_path / "cache" / "inductor-globals")
    assert os.path.isdir(link), "the link dangles"
    # another rank of the launch saw no link and made it between the check and the symlink
    monkeypatch.setattr(os.path, "lexists", lambda p: False)
    assert keep_inductor_globals() is None and os.path.isdir(link)
