#!/bin/bash
# The wheels a lent GPU machine's image lacks, or has at versions fwcompare does
# not run with (transformers 5, huggingface-hub 1.x, tokenizers 0.23), for its
# Python 3.12 on Linux x86_64, at the lock's versions, into build/gpuwheels
# (about 41 MB; carried to that machine, which reaches no package index). Its
# image has torch, JAX, flax, optax, pandas, pyarrow, seaborn and onnxruntime;
# neither TensorFlow (too large to carry) nor the MiniLM package (83 MB).
# Usage, in the repository root: bash benchmarks/gpu/wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=build/gpuwheels
mkdir -p "$dest"
py=${PYTHON:-.venv/bin/python}
get=("$py" -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp
     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
     --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64
     --platform manylinux_2_28_x86_64 --index-url https://pypi.org/simple
     -c requirements.lock -d "$dest")
# fwcompare's own needs beside the image's frameworks, each alone (theirs are there)
"${get[@]}" --no-deps transformers huggingface-hub tokenizers jmp platformdirs accelerate \
  grain array-record portpicker
# the notebooks' stack (papermill, nbconvert, a kernel) with what it needs, and
# what the image may lack: report_check.sh installs only the missing ones
"${get[@]}" papermill nbconvert ipykernel nvidia-ml-py cloudpickle "etils[epath,epy]" \
  protobuf absl-py pyyaml psutil safetensors
ls "$dest" | wc -l | xargs echo "wheels in $dest:"
du -sh "$dest"
