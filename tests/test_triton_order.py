"""PyPI's torch brings triton on Linux, and triton imported after TensorFlow
kills the process (SIGSEGV). The TensorFlow backend imports it first, or marks
it absent where TensorFlow came first (frameworks/tensorflow/backend.py). This checks
both orders in fresh interpreters; where triton is installed (PyPI's torch), a
crash fails it. Where it is not (CI: a CPU build of torch) it checks that the
order is kept, not the crash, which needs triton to happen."""
import os
import subprocess
import sys

import pytest

from fwcompare.core.paths import ROOT

PROGRAM = """
import sys
{first}
from fwcompare.frameworks.tensorflow import backend
backend.configure(1, "cpu")
import transformers
transformers.TFAutoModel  # transformers' TF classes: their generation code imports torch._dynamo
import torch._dynamo
t = sys.modules.get("triton", "not imported")
print("triton:", "absent" if t is None else "not imported" if t == "not imported" else "loaded")
"""


@pytest.mark.slow
@pytest.mark.parametrize("first, expected", [
    ("", ("loaded", "not imported")),  # loaded where installed; not, where it is not
    ("import tensorflow", ("absent",)),
])
def test_tensorflow_and_triton_load_in_either_order(first, expected):
    r = subprocess.run([sys.executable, "-c", PROGRAM.format(first=first)], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("triton: ")[-1].strip() in expected, r.stdout
