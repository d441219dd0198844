"""Deployment: every path from a trained model to a runtime, with what it
costs in speed, size and accuracy.

Each path is a ``mode`` of its framework (:data:`PATHS`). From the shared
weights, the prepare job exports every path of a model, one process per
framework (``fwcompare.studies.deployment.export`` run as ``export_main``): the
artifact, its export time and size, or the converter's message when a path
does not export. Each path's cells then run in a worker process of their own
that never held the framework's model: the artifact's load there is a cold
load in a fresh process (``load_s``), its first call and steady state are
timed by the shared protocol, interleaved with the framework's own baseline
(PyTorch eager, TensorFlow ``tf.function``, ``jax.jit``). Every cell's output
is compared with a float64 PyTorch reference (max abs, relative L2, cosine,
argmax agreement); on real weights with a tokenizer, the cosine similarities
of the sentence pairs in ``fwcompare/data/sentence_pairs.tsv`` are compared
with PyTorch float32's (Spearman correlation): what a user of a sentence
embedding model would notice.

The study's parts: ``catalog`` (the paths, where artifacts live, the
sentence pairs), ``export`` (the prepare job: sentences and export
processes), ``formats`` (the shared runtimes; each framework's exporter and
runtime live in its package, ``frameworks/<name>/export.py``), ``worker``
(an artifact path's cell), ``tables`` (tables and claim metrics) and
``figures``; this module holds the study and registers it.
"""
from __future__ import annotations

import os

from ...core import models
from ...frameworks import defaults
from ...results.judging import Metric, check_cells
from ...plan.schema import TIMING, Param, grid_params, non_negative, positive
from ...results.store import Columns
from ...measure.workloads import EQUIV_TOL, PRECISION_COLUMNS, plan_inference
from ...execution.study import Study, per_mode

# The study's parts; every name of each is reachable from the package, as
# from the one module it was (``study.deployment_table``, ``study.PATHS``).
from .catalog import (BASELINE, DEPLOY_MODES, PATHS, SENTENCE_PAIRS, STS_COLUMNS,  # noqa: F401
                      DeployPath, artifact_dir, pair_similarities, path_of, read_pairs,
                      sentence_agreement, sentences_path)
from .export import (export_all, export_key, export_main, export_modes, export_one,  # noqa: F401
                     read_record, write_sentences)
from .figures import WEIGHTS_MARKER, size_and_load, speed_vs_error  # noqa: F401
from .formats import (CPU_ONLY, RUNTIMES, Exporter, ExportUnsupported, LiteRT,  # noqa: F401
                      OnnxRuntime, Runtime, converter_message, converter_status, exporter_class)
from .tables import (PATH_KEYS, deployment_table, path_summary, path_works,  # noqa: F401
                     paths_table, sentence_agreement_metric, size_ratio)
from .worker import ArrayBackend, Loaded, after_checks, load_artifact, plan_path  # noqa: F401


class Deployment(Study):
    name = "deployment"
    title = "Deployment: export, runtimes and quantization"
    # the artifact's export and size; sentence-pair agreement with float32; the
    # processes that exported and loaded it
    columns = PRECISION_COLUMNS + Columns(
        figures=("export_s", "artifact_bytes", "sts_spearman", "sts_max_abs_diff"),
        provenance=(("exporter_pid", "float64"), ("runtime_pid", "float64")))
    modes = DEPLOY_MODES
    # Its prepare job is mostly the exports, which are measured (export_s,
    # artifact_bytes); the weights and gate references are a few seconds of it.
    prepare_phase = "exports (export_s, artifact sizes), weights and gate references"
    figure_phases = (prepare_phase,)

    def schema(self):
        return {
            **grid_params(["all-minilm-l6-v2"], defaults(lambda f: f.deploy_paths),
                          DEPLOY_MODES, [1], [128], 1800.0, tf_autograph=None),
            "equiv_tol": EQUIV_TOL,
            "mp_equiv_rtol": Param("float", 1.0, "relative L2 error against float64 on the gate batch above which a float16 or INT8 path is flagged not_equivalent: a bound against a broken conversion (an unrelated output of the same size scores about 1.4), not a judgement of accuracy (see the sentence-pair agreement)", positive),
            "onnx_opset": Param("int", 18, "ONNX opset of torch.onnx.export and tf2onnx", positive),
            "representative_batches": Param("int", 8, "calibration batches of full-integer TFLite quantization (seeded token ids at the smallest shape)", positive),
            "export_jobs": Param("int", 1, "export processes at once in the prepare job (one per framework, and one per path that has a process of its own); each is mostly one thread, so 2 on a 2-core machine nearly halves the wait, and each export time then shares the machine with another's", positive),
            "export_timeout_s": Param("float", 900.0, "seconds one framework's exports of one model may take before the path in progress is stopped as timeout", positive),
            "sentence_len": Param("int", 16, "tokens per sentence of the sentence-pair check (real weights with a tokenizer; each sentence cut to this length, so every path sees one batch of one shape); 0: no check", non_negative),
            **TIMING,
        }

    def check(self, params):
        problems = []
        for fw in params["frameworks"]:
            base = BASELINE[fw]
            modes = params["modes"].get(fw, [])
            if modes and base not in modes:
                problems.append(f"modes: {fw} must include {base!r} (the baseline of every "
                                f"{fw} path's speed-up)")
        return problems

    def head(self, task, model):
        if models.model_type(model) in models.DECODERS:
            return "causal_lm"  # logits: argmax agreement is next-token agreement
        return "base"

    def fp64_shapes(self, task, cells):
        return sorted({(s.batch_size, s.seq_len) for s in cells})

    def groups(self, task, cells):
        return per_mode(cells)  # a fresh process per path

    def backend(self, framework):
        from ...frameworks import get_backend

        return ArrayBackend(get_backend(framework))

    def prepare(self, job):
        from ...measure.gate import prepare

        prepare(job)
        write_sentences(job)
        export_all(job, job.threads)

    def plan(self, ctx, spec):
        if path_of(spec.framework, spec.mode).artifact:
            return plan_path(ctx, spec)
        plan = plan_inference(ctx, spec)
        fwd = ctx.variant(("inference", spec.dtype), None).forwards[spec.mode]

        def embed(ids):
            out = fwd(ctx.backend.make_inputs(ids, ctx.device))
            ctx.backend.sync(out)
            return ctx.backend.to_numpy(out)
        plan.after = after_checks(ctx, spec, embed)
        plan.provenance = dict(plan.provenance, runtime_pid=os.getpid())
        return plan


Deployment.metrics = {
    "size_ratio": Metric(size_ratio, ("a", "b"), check_cells),
    "sentence_agreement": Metric(sentence_agreement_metric, ("a",), check_cells,
                                 per_round=True),
    "path_works": Metric(path_works, ("a",), check_cells, per_round=True),
}
STUDY = Deployment()
