#!/bin/bash
# The gpu profile's check on a GPU machine that reaches no package index (issue
# 49): the whole `gpu` report once, from a fresh folder, timed, with its log,
# scorecard and stored results (less the workers' scratch: weights, compile
# caches) packed under $OUT for the machine that sent it. First, where pip
# reaches PyPI: bash benchmarks/gpu/wheels.sh (build/ is git-ignored: the copy
# sent to the GPU machine must carry build/gpuwheels by name). Then, on the GPU
# machine, in that copy:
#   OUT=/some/folder bash benchmarks/gpu/report_check.sh
# LIMIT (seconds, default 590: a call of 600 s): the report's time budget is what
# the call leaves it (at most the profile's ten minutes: its extra rounds stop in
# time for its notebooks), it is stopped (SIGTERM: its finished cells are kept,
# `fwcompare report --profile gpu` resumes them) in time to pack, and what is left
# of the call goes to benchmarks/gpu/dataloader_probe.py. Back
# here: tar xzf results.tgz (claims.scorecard judges the results if the report was
# stopped before its scorecard; worker_logs.tgz holds the workers' logs); keep scorecard.json as
# benchmarks/gpu/scorecards/<date>-<gpu>-<commit>.json, and compare two runs of one
# kind of GPU with .venv/bin/python benchmarks/reproducibility.py --scorecards A B.
START=$(date +%s); LIMIT=${LIMIT:-590}
left() { echo $(( START + LIMIT - $(date +%s) )); }
: "${OUT:?set OUT to the folder that takes the log and results}"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/check.log") 2>&1
cd "$(dirname "$0")/../.."
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm,clocks.sm,pstate,temperature.gpu --format=csv
lscpu | grep -E "Model name|^CPU\(s\)"
# install the carried wheels the image lacks; transformers, its hub and tokenizers always
# (the image's are too new for transformers 4, the last with TensorFlow and Flax classes)
python3 - > /tmp/fwc-wheels.txt <<'PY'
import importlib.metadata as md, pathlib, re
force = {"transformers", "huggingface-hub", "tokenizers"}
for w in sorted(pathlib.Path("build/gpuwheels").glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower()
    try:
        md.version(name)
        have = True
    except md.PackageNotFoundError:
        have = False
    if name in force or not have:
        print(w)
PY
[ -s /tmp/fwc-wheels.txt ] || { echo "no wheels in build/gpuwheels: run benchmarks/gpu/wheels.sh first"; exit 1; }
timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/fwc-site $(cat /tmp/fwc-wheels.txt) || { echo "installing the wheels failed"; exit 1; }
export PYTHONPATH=/tmp/fwc-site:$PWD
# nbconvert's templates (and the kernelspecs) of a --target install are data files under
# its share/jupyter, outside the Jupyter path: without this every study page fails to
# render (2026-11-30, H200: "No template sub-directory with name 'lab'")
export JUPYTER_PATH=/tmp/fwc-site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}
python3 -c "import transformers, papermill, torch, jax; print('transformers', transformers.__version__, 'torch', torch.__version__, 'jax', jax.__version__, jax.devices())" || exit 1
python3 -c "from nbconvert import HTMLExporter; HTMLExporter().template_paths" || { echo "nbconvert finds no templates"; exit 1; }
rm -rf outputs/gpu  # a warm machine's earlier run: no scorecard of it is sent as this one's
T1=$(date +%s)
limit=$(( $(left) - 12 ))
[ "$limit" -gt 60 ] || { echo "only ${limit} s left for the report: raise LIMIT"; exit 1; }
# the report's time budget: the profile's ten minutes, or what the call has left if less,
# so that its extra rounds for doubtful claims end in time for its notebooks
# (less 10 s: the report's clock starts after its interpreter and imports)
budget=$(awk -v s="$limit" 'BEGIN { b = (s - 10) / 60; if (b > 10) b = 10; printf "%.2f", b }')
timeout -s TERM -k 5 "$limit" python3 -m fwcompare report --profile gpu --fresh --out "$PWD/outputs" \
  --budget "$budget"
echo "report: exit $? after $(( $(date +%s) - T1 )) s (install and checks before it: $(( T1 - START )) s)"
cp outputs/gpu/summary/scorecard.json "$OUT/" 2>/dev/null || echo "no scorecard: judge the results here (claims.scorecard)"
tar czf "$OUT/results.tgz" --exclude=work --exclude=previous --exclude=.forkservers \
  --exclude='*.html' --exclude='*.ipynb' --exclude='*.png' --exclude='*.svg' -C outputs gpu
# the workers' own logs (their stderr: a DataLoader worker's abort message, say), small ones
(cd outputs && find gpu -path '*/work/*' -name '*.log' -size -2M) | tar czf "$OUT/worker_logs.tgz" -C outputs -T -
# what is left of the call: the DataLoader probe (end_to_end's fed step aborted twice on the
# H200, 2026-11-30: a DataLoader worker after a pipeline without one; fork against spawn)
probe=$(( $(left) - 8 ))
if [ "$probe" -gt 20 ]; then
  timeout -k 5 "$probe" python3 benchmarks/gpu/dataloader_probe.py --steps 30 > "$OUT/dataloader_probe.log" 2>&1
  echo "dataloader probe: exit $? (log: dataloader_probe.log)"
else
  echo "no time left for benchmarks/gpu/dataloader_probe.py"
fi
ls -la "$OUT"
nvidia-smi --query-gpu=clocks.sm,pstate,temperature.gpu,power.draw --format=csv
date -u
exec >&- 2>&-  # the log's tee sees its end and writes out its last lines
sleep 1
