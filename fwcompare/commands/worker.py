"""A worker process's entry point: ``python -m fwcompare.commands.worker JOB.json``.

The job (:class:`fwcompare.plan.job.Job`) names its study; the study's hooks do
the rest: ``prepare`` for a prepare job (weights and the gate's references),
``work`` for a job of cells (by default: answer the runner's requests, see
:mod:`fwcompare.core.messages`; a data-parallel rank runs its cells itself). The
parent never imports this module: both sides share ``messages`` and ``job``.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    from ..core.machine_load import pin_threads

    raw = json.loads(Path(argv[0]).read_text())
    pin_threads(raw["threads"])
    # Which process ran the job (forked from a fork server or not), for its log.
    print(f"fwcompare worker: pid {os.getpid()}, parent {os.getppid()}", file=sys.stderr,
          flush=True)
    from .. import studies
    from ..plan.job import PEAK, PREPARE, Job

    if raw.get("framework_file"):  # a framework declared outside fwcompare (a test's)
        from ..frameworks import load

        load(raw["framework"], raw["framework_file"])
    # The study first: its cell axes are registered before the job's cells are read.
    study = studies.load(raw["study"], raw.get("study_file", ""))
    job = Job.read(argv[0])
    # The params as the parent typed them (checked there, once: not again here).
    job = job.replace(params=study.params_type()(**job.params))
    try:
        if job.kind == PEAK:
            from ..measure.peak import probe, probe_file

            found = probe(study.backend(job.framework), job.framework, job.device,
                          list(job.peak_dtypes), job.threads)
            probe_file(job).write_text(json.dumps(found))
        elif job.kind == PREPARE:
            study.prepare(job)
        else:
            study.work(job)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
