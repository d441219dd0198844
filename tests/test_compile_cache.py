"""The rounds after the first load their compiled programs from round 0's
caches: JAX's and TensorFlow's persistent XLA caches, set by the runner
(``launch.use_compile_cache``) and read by each backend's ``configure`` after
the framework was imported, as in a worker forked from its server."""
import os
import subprocess
import sys

import pytest

from fwcompare.launch import fresh_compile_cache, use_compile_cache
from fwcompare.paths import ROOT

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
