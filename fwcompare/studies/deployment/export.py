"""The prepare job's side: the sentence pairs' reference (PyTorch float32's
similarities) and every artifact path's export, one process per framework
(``fwcompare.studies.deployment.export`` run as :func:`export_main`); each
artifact's record says what its export found."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ...core import models
from ...measure.cell import inject_fault
from .catalog import (PATHS, SENTENCE_PAIRS, artifact_dir, model_dir, pair_similarities, path_of,
                      read_pairs, sentences_path)
from .formats import (CPU_ONLY, SHARED_STEPS_ENV, converter_message, converter_status,
                      exporter_class)


# -- export (prepare side: one process per framework) ---------------------------------
def export_key(job, framework: str, mode: str) -> str:
    """What an artifact depends on: the weights, the path, the shapes, the
    export settings and the library versions."""
    p = job.params
    blob = json.dumps([job.model_key, framework, mode, job.device, p["batch_sizes"],
                       p["seq_lens"], p["sentence_len"], p["onnx_opset"],
                       p["representative_batches"], job.seed,
                       dict(job.provenance.get("versions", {})),
                       job.provenance.get("git_commit", "")], sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _record_path(job, framework: str, mode: str) -> Path:
    return artifact_dir(job, framework, mode) / "record.json"


def read_record(job, framework: str, mode: str) -> dict | None:
    try:
        return json.loads(_record_path(job, framework, mode).read_text())
    except (OSError, ValueError):
        return None


def _write_record(job, framework: str, mode: str, record: dict) -> None:
    from ...core.atomic import write_json

    path = _record_path(job, framework, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != "record.json")


def export_modes(job, framework: str) -> list[str]:
    """The paths of ``framework`` a prepare job exports (artifact paths among the params' modes)."""
    if framework not in job.params["frameworks"]:
        return []
    return [m for m in job.params["modes"].get(framework, []) if path_of(framework, m).artifact]


def export_all(job, threads: int) -> None:
    """Every artifact path of the job's model, one process per framework
    (imports of one framework only; the paths of a named ``process`` in one
    more, a step they share with the others made once: ``Exporter.step``);
    an artifact whose record matches its :func:`export_key` is kept. A
    process that dies marks the path it was exporting ``error`` with its
    message, and a fresh one takes the rest. ``export_jobs`` processes
    export at once (each mostly one thread of Python and converter passes),
    the frameworks' own first in PATHS order, then the named ones."""
    import shutil
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    groups: dict[tuple[str, str], list[str]] = {}
    for fw in PATHS:
        for m in export_modes(job, fw):
            groups.setdefault((fw, path_of(fw, m).process), []).append(m)
    model_dir(job).mkdir(parents=True, exist_ok=True)
    shared = tempfile.mkdtemp(prefix="shared-steps-", dir=model_dir(job))  # this stage's only
    try:
        with ThreadPoolExecutor(max_workers=job.params["export_jobs"]) as pool:
            # the named processes last: the steps they share are made by then
            for done in [pool.submit(_export_group, job, fw, name, modes, threads, shared)
                         for (fw, name), modes in sorted(groups.items(),
                                                         key=lambda g: g[0][1] != "")]:
                done.result()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _export_group(job, fw: str, name: str, modes: list[str], threads: int,
                  shared: str) -> None:
    """Paths of one framework that share an export process (see DeployPath.process)."""
    from ...execution.launch import log_tail
    from ...frameworks import worker_env, worker_only

    timeout = job.params["export_timeout_s"]
    log = Path(job.gate_dir).parent / "jobs" / f"export-{fw}{'-' + name if name else ''}-" \
                                               f"{job.model_key}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    todo = [m for m in modes
            if (read_record(job, fw, m) or {}).get("key") != export_key(job, fw, m)]
    if job.device == "gpu":
        for m in [m for m in todo if path_of(fw, m).runtime in CPU_ONLY]:
            _write_record(job, fw, m, {"key": export_key(job, fw, m), "status": "unsupported",
                                       "message": CPU_ONLY[path_of(fw, m).runtime]})
            todo.remove(m)
    while todo:
        env = worker_env(threads, job.device, fw)
        for name in ("USE_TF", "USE_FLAX", "USE_TORCH"):  # the prepare job's, not fw's
            if name not in worker_only(fw):
                env.pop(name, None)
        env["FWCOMPARE_EXPORT_MODES"] = ",".join(todo)
        env[SHARED_STEPS_ENV] = shared
        with open(log, "a") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from fwcompare.studies.deployment.export "
                 "import export_main; sys.exit(export_main(sys.argv[1], sys.argv[2]))",
                 str(job.write(log.with_suffix(".json"))), fw],
                env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
            try:
                proc.wait(timeout=timeout)
                why = "" if proc.returncode == 0 else f"exit code {proc.returncode}"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                why = f"no result within export_timeout_s ({timeout:g} s)"
        left = []
        for m in todo:
            rec = read_record(job, fw, m)
            if rec is not None and rec.get("key") == export_key(job, fw, m) \
                    and rec["status"] != "started":
                continue
            if rec is not None and rec.get("status") == "started":  # the one it died in
                status = "timeout" if why.startswith("no result") else "error"
                _write_record(job, fw, m, dict(rec, status=status, message=(
                    f"the export process stopped ({why}): {log_tail(log, 1200)}")))
            else:
                left.append(m)
        if left == todo:  # nothing was started: do not loop
            for m in left:
                _write_record(job, fw, m, {"key": export_key(job, fw, m), "status": "error",
                                           "message": f"the export process stopped before "
                                                      f"{m} ({why}): {log_tail(log, 1200)}"})
            left = []
        todo = left


def export_main(job_path: str, framework: str) -> int:
    """An export process: the modes in FWCOMPARE_EXPORT_MODES of ``framework``."""
    from ...frameworks import backend_options, get_backend
    from ...plan.job import Job

    job = Job.read(job_path)
    backend = get_backend(framework)
    backend.configure(job.threads, job.device, backend_options(job.params))
    from ...measure.gate import Gate

    gate = Gate(job.gate_path)
    modes = os.environ["FWCOMPARE_EXPORT_MODES"].split(",")
    exporter = exporter_class(framework)(job, backend, gate, model_dir(job),
                                          sentences_path(job))
    try:
        for mode in modes:
            export_one(job, framework, mode, exporter)
    finally:
        import shutil

        shutil.rmtree(exporter.tmp, ignore_errors=True)
    return 0


def export_one(job, framework: str, mode: str, exporter) -> None:
    """One path's artifact and its record (the converter's message if it fails)."""
    key = export_key(job, framework, mode)
    out = artifact_dir(job, framework, mode)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    _write_record(job, framework, mode, {"key": key, "status": "started",
                                         "exporter_pid": os.getpid()})
    print(f"fwcompare: exporting {framework}/{mode} of {job.model}", file=sys.stderr,
          flush=True)
    t0 = time.perf_counter()
    try:
        inject_fault(f"export {framework}/{mode}")
        setup = exporter.export(mode, out) or ""
        record = {"status": "ok", "message": "", "export_s": time.perf_counter() - t0
                  + exporter.reused_s, "artifact_bytes": _dir_bytes(out), "setup": setup}
    except Exception as exc:
        import traceback

        traceback.print_exc()
        record = {"status": converter_status(exc), "message": converter_message(exc)}
    _write_record(job, framework, mode, dict(record, key=key, exporter_pid=os.getpid()))


def write_sentences(job) -> None:
    """The sentence pairs' token ids (each sentence cut to ``sentence_len``
    tokens) and PyTorch float32's similarities of them, for a model with a
    tokenizer and hidden states; nothing otherwise."""
    from ...core.atomic import write_atomic
    from ...frameworks import REFERENCE, get_backend

    path = sentences_path(job)
    path.unlink(missing_ok=True)
    n = job.params["sentence_len"]
    local = models.local_path(job.model)
    if not n or job.head != "base" or local is None or not (
            (local / "tokenizer.json").is_file() or (local / "vocab.txt").is_file()):
        return
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(local), local_files_only=True)
    texts = [t for pair in read_pairs() for t in pair]
    ids = np.array([tok(t, truncation=True, max_length=n)["input_ids"] for t in texts
                    if len(tok(t)["input_ids"]) >= n])
    if len(ids) != len(texts):
        raise ValueError(f"every sentence of {SENTENCE_PAIRS.name} must fill sentence_len "
                         f"({n}) tokens of {job.model}'s tokenizer")
    ref_backend = get_backend(REFERENCE)
    from ...measure.gate import Gate

    net = ref_backend.load(Gate(job.gate_path).info["weights_dir"], "cpu", job.head)
    forward = ref_backend.make_forward(net, "eager", "cpu", job.head)
    reference = pair_similarities(ref_backend.to_numpy(forward(
        ref_backend.make_inputs(ids, "cpu"))))

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, ids=ids, reference=reference)
    write_atomic(path, write)
