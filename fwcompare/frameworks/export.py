"""What the frameworks' deployment exporters and runtimes share: the
exporter base (each framework's ``export.py`` subclasses it, one method per
artifact path), the runtime base, and the converter's words. Light: numpy
only; the frameworks and converters are imported where used."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

# The folder where the export processes of one export stage share their
# steps (``Exporter.step``); unset, each process makes its own.
SHARED_STEPS_ENV = "FWCOMPARE_EXPORT_STEPS"


class ExportUnsupported(Exception):
    """A converter refused the model (an operation or a shape it cannot express)."""


def converter_status(exc: BaseException) -> str:
    name = type(exc).__name__
    return "unsupported" if isinstance(exc, ExportUnsupported) or name == "ConverterError" \
        else "error"


def converter_message(exc: BaseException, chars: int = 1500) -> str:
    """The converter's own words: its exception, the lines that say what failed first."""
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    key = [ln for ln in lines if "error" in ln.lower() or "not supported" in ln.lower()
           or "unsupported" in ln.lower()]
    text = "\n".join(dict.fromkeys(lines[:2] + key[:4]))
    return text[:chars]


class Exporter:
    """A framework's exporter in the deployment study's export process: the
    model with the shared weights, then one ``export_<mode>`` method per
    artifact path (``Framework.deploy_paths``). ``sentences``: the
    sentence-pair batch's file, where the model has one (its static-shape
    artifacts need that shape too). ``folder``: the study's folder for this
    model's artifacts; the steps are made in a scratch folder inside it, on
    the file system of the stage's shared steps (:func:`shared_step` moves a
    step from one to the other)."""

    def __init__(self, job, backend, gate, folder: Path, sentences: Path | None = None):
        self.job, self.backend, self.gate = job, backend, gate
        self.sentences = sentences
        self.model = backend.load(gate.info["weights_dir"], job.device, job.head)
        self.example = gate.ids
        self.steps: dict[str, tuple[Path, float]] = {}
        self.reused_s = 0.0
        import tempfile

        folder.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="steps-", dir=folder))  # removed at the end

    def sentence_shape(self) -> tuple[int, int] | None:
        """The sentence-pair batch's shape, where the model has one (its
        static-shape artifacts need it too)."""
        path = self.sentences
        if path is None or not path.is_file():
            return None
        with np.load(path) as s:
            return tuple(s["ids"].shape)

    def shapes(self) -> list[tuple[int, int]]:
        maxpos = self.gate.info["max_positions"]
        return [(b, s) for b in self.job.params["batch_sizes"] for s in self.job.params["seq_lens"]
                if not maxpos or s <= maxpos]

    def representative(self):
        """Calibration batches for full-integer quantization: seeded token ids
        at the grid's smallest shape (a different seed from any cell's)."""
        b, s = min(self.shapes(), key=lambda t: t[0] * t[1])
        from ..core.models import token_ids

        vocab = self.gate.info["vocab_size"]
        for i in range(self.job.params["representative_batches"]):
            yield token_ids(self.job.seed + 1000 + i, b, s, vocab).astype(np.int32)

    def export(self, mode: str, out: Path) -> str:
        """``mode``'s artifact in ``out``; its setup in words. A step another
        path of this process already made (the ONNX export under its fused
        and quantized models, the SavedModel under TFLite) is reused, and
        its time is added to this path's (``reused_s``): a path's export time
        is what it takes from the model."""
        out.mkdir(parents=True, exist_ok=True)
        self.reused_s = 0.0
        return getattr(self, "export_" + mode.replace("-", "_"))(out)

    def step(self, name: str, make) -> Path:
        """A shared step's output (``make(dir) -> path``), made once per
        process, and once per export stage where its processes share a
        folder (:data:`SHARED_STEPS_ENV`; :func:`shared_step`): a path in
        another process reuses it as one in this process would. Its seconds
        are added to each path that reuses it (``reused_s``); the time this
        process waited for another to make it is taken off, for its export
        time counts from its own start."""
        import tempfile

        if name in self.steps:
            path, seconds = self.steps[name]
            self.reused_s += seconds
            return path
        shared = os.environ.get(SHARED_STEPS_ENV)
        if shared:
            path, seconds, made, waited = shared_step(
                Path(shared) / f"{type(self).__name__}-{name}", make, self.tmp)
            if not made:
                self.reused_s += seconds - waited
        else:
            t0 = time.perf_counter()
            path = make(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.tmp)))
            seconds = time.perf_counter() - t0
        self.steps[name] = (path, seconds)
        return path


def shared_step(where: Path, make, tmp: Path) -> tuple[Path, float, bool, float]:
    """A step made once by whichever process asks first (``make(dir) ->
    path`` in a folder of ``tmp``, then moved whole to ``where``, on the same
    file system); a process that asks while it is being made waits for it
    (flock: a maker that dies releases it, and the next one makes it).
    Returns (its path, the seconds it took to make, whether this process made
    it, the seconds this process waited for it)."""
    import fcntl
    import tempfile

    t0 = time.perf_counter()
    with open(where.with_name(where.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.perf_counter() - t0
        done = where / "step.json"
        if done.is_file():
            got = json.loads(done.read_text())
            return where / got["path"], got["seconds"], False, waited
        t0 = time.perf_counter()
        d = Path(tempfile.mkdtemp(prefix=f"{where.name}-", dir=tmp))
        path = make(d)
        seconds = time.perf_counter() - t0
        (d / "step.json").write_text(json.dumps({"path": str(path.relative_to(d)),
                                                 "seconds": seconds}))
        os.rename(d, where)  # whole or not at all
        return where / path.relative_to(d), seconds, True, waited


class Runtime:
    """A loaded artifact: ``inputs(ids)`` makes its inputs (outside timing),
    ``run(x)`` one call, returning the runtime's own output."""

    setup = ""

    def inputs(self, ids: np.ndarray):
        return ids

    def run(self, x):
        raise NotImplementedError
