"""The report's notebooks: papermill executes each in a kernel of this
environment, in notebook processes that take job after job (``python -m
fwcompare.suite.report``); nbconvert renders its HTML with the code hidden."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import yaml

from ...core.atomic import write_text
from ...execution.forkserver import kill_group
from ...core.paths import NOTEBOOKS, ROOT
from ...studies import STUDIES
from .breakdown import _mmss
from .page import SUMMARY


class ReportError(RuntimeError):
    """One or more studies failed; the others and the index were still written."""


def _render_html(notebook: Path, target: Path) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    try:
        exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True,
                                exclude_output_prompt=True)
        body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))
    except Exception as exc:  # its first line names the problem; the last, a path
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RuntimeError(
            f"{notebook.name} ran, but nbconvert could not render its HTML page "
            f"({type(exc).__name__}: {first}; nbconvert's templates are found through "
            f"JUPYTER_PATH and the environment's share/jupyter)") from exc
    write_text(target, body)




# The Jupyter kernel of this environment's interpreter: papermill runs every
# notebook in it, the notebooks name it, `make lab` offers it.
KERNEL = "fwcompare"


def ensure_kernel() -> str:
    """Register KERNEL for this interpreter (``<sys.prefix>/share/jupyter``)
    unless it already points here; return its name. Without it, papermill's
    ``python3`` ran whatever interpreter a user's own kernelspec named."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def found():
        try:
            return KernelSpecManager().get_kernel_spec(KERNEL)
        except NoSuchKernel:
            return None
    spec = found()
    if spec is not None and spec.argv[0] == sys.executable:
        return KERNEL
    from ipykernel.kernelspec import install

    install(kernel_name=KERNEL, display_name=f"fwcompare ({Path(sys.prefix).name})",
            prefix=sys.prefix)
    spec = found()
    if spec is None or spec.argv[0] != sys.executable:  # one earlier on Jupyter's path
        raise ReportError(
            f"the Jupyter kernel {KERNEL!r} at {spec.resource_dir if spec else '?'} runs "
            f"{spec.argv[0] if spec else '?'}, not this environment's {sys.executable}: "
            f"remove it (jupyter kernelspec remove {KERNEL}) and run again")
    return KERNEL


def run_notebook(study: str, profile: str, params: dict, out: Path,
                 notebook: str | None = None) -> Path:
    """Execute a study notebook (or ``notebook``) into ``out``. On failure the
    partial notebook is kept as ``<study>.failed.ipynb`` (for its traceback)
    and the error re-raised."""
    import papermill as pm

    out.mkdir(parents=True, exist_ok=True)
    nb_in = NOTEBOOKS / (notebook or STUDIES[study].notebook)
    tmp = out / f".{study}.running.ipynb"
    try:
        pm.execute_notebook(str(nb_in), str(tmp), cwd=str(ROOT), kernel_name=ensure_kernel(),
                            parameters={**params, "profile": profile, "output_dir": str(out)},
                            log_output=True, progress_bar=False)
    except BaseException:
        if tmp.exists():
            os.replace(tmp, out / f"{study}.failed.ipynb")
        raise
    final = out / f"{study}.ipynb"
    os.replace(tmp, final)
    (out / f"{study}.failed.ipynb").unlink(missing_ok=True)
    return final


@dataclasses.dataclass
class NotebookJob:
    """One notebook to execute and render: a study's, or the scorecard's."""

    name: str
    profile: str
    out: Path
    digest: str  # its inputs' hash: written to ``.inputs`` once it succeeded
    params: dict
    notebook: str  # its path (the process it runs in reads no patched NOTEBOOKS)
    params_file: Path


def notebook_jobs() -> int:
    """How many notebooks run at once: one per core, at most 4 (each is a
    kernel plus papermill, mostly one core's work)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))



def run_notebooks(jobs: list[NotebookJob], failures: dict[str, str],
                  progress: bool = True) -> dict[str, float]:
    """Execute and render ``jobs``, :func:`notebook_jobs` at a time, in as many
    notebook processes (``python -m fwcompare.suite.report``, each in a session of
    its own): each imports papermill and nbconvert once and takes the jobs it
    is handed one after another, every notebook in a fresh kernel, its output
    in ``<out>/.notebook.log``. A process per notebook paid those imports,
    Python's start and nbconvert's templates (seconds each: measurements.md, "comments quoted")
    for every notebook of a report, ten in a quick one. A failure is recorded in
    ``failures``, never raised; a process that dies takes only its own job
    with it (a fresh one takes the rest). Returns each succeeded job's seconds.
    On an interrupt or error here, the processes are told to stop (SIGTERM:
    papermill shuts its kernel down), then killed."""
    import queue
    import threading

    pending, took = list(jobs), {}
    results: queue.Queue = queue.Queue()
    procs: list[subprocess.Popen] = []
    busy: dict[int, tuple[NotebookJob, float]] = {}  # process index -> its job, since when
    if jobs:
        ensure_kernel()  # once, here: the processes would race to register it

    def start() -> int:
        proc = subprocess.Popen([sys.executable, "-m", "fwcompare.suite.report"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, cwd=ROOT, text=True,
                                start_new_session=True)  # stopped by us, not by Ctrl-C
        procs.append(proc)
        i = len(procs) - 1

        def read() -> None:
            for line in proc.stdout:
                results.put((i, line))
            results.put((i, None))
        threading.Thread(target=read, daemon=True).start()
        return i

    def hand(i: int) -> None:
        job = pending.pop(0)
        job.out.mkdir(parents=True, exist_ok=True)
        if progress:
            print(f"{job.name}: running {Path(job.notebook).name} (profile {job.profile})",
                  file=sys.stderr)
        busy[i] = (job, time.perf_counter())
        try:
            procs[i].stdin.write(json.dumps({**dataclasses.asdict(job), "out": str(job.out),
                                             "params_file": str(job.params_file)}) + "\n")
            procs[i].stdin.flush()
        except OSError:  # it ended while idle: a fresh one takes the job
            del busy[i]
            pending.insert(0, job)
            hand(start())

    def failed(job: NotebookJob, why: str) -> None:
        failures[job.name] = why
        where = (job.out / f"{job.name}.failed.ipynb" if (job.out / f"{job.name}.failed.ipynb")
                 .exists() else job.out / ".notebook.log")
        print(f"{job.name}: FAILED ({why}); see {where}", file=sys.stderr)

    try:
        for _ in range(min(notebook_jobs(), len(jobs))):
            hand(start())
        last: dict[int, str] = {}  # a process's last words outside a job (its start)
        while busy:
            try:
                i, line = results.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                said = json.loads(line) if line is not None else None
            except json.JSONDecodeError:
                said = None
            if line is not None and not isinstance(said, dict):
                last[i] = line.strip() or last.get(i, "")
                continue
            if i not in busy:  # an idle process ended: nothing lost
                continue
            job, t0 = busy.pop(i)
            if said is None:  # the process ended with its job unfinished
                code = procs[i].wait()
                log = job.out / ".notebook.log"
                text = log.read_text(errors="replace") if log.is_file() else ""
                failed(job, f"the notebook's process ended with code {code}: "
                       + (" ".join(text.strip().splitlines()[-1:]) or last.get(i, "")))
                if pending:
                    hand(start())
                continue
            if said["ok"]:
                took[job.name] = time.perf_counter() - t0
                if progress:
                    print(f"{job.name}: done in {_mmss(took[job.name])}", file=sys.stderr)
            else:
                failed(job, said["failure"])
            if pending:
                hand(i)
    finally:
        for proc in procs:  # idle: end of input; still busy (an interrupt): SIGTERM
            if proc.poll() is None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        for i in busy:
            if procs[i].poll() is None:
                procs[i].terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                proc.wait()
    return took


def _notebook_job(job: NotebookJob) -> str:
    """One job of a notebook process: execute, render, stamp. "" when it
    succeeded, else why it failed (one line; the traceback in its log)."""
    try:
        _execute_and_render(job)
    except Exception as exc:  # one failed study never loses the others
        traceback.print_exc()
        last_line = (str(exc).strip().splitlines() or [""])[-1]
        return f"{type(exc).__name__}: {last_line}"
    return ""


def _execute_and_render(job: NotebookJob) -> None:
    executed = run_notebook(job.name, job.profile, job.params, job.out, job.notebook)
    _render_html(executed, job.out / f"{job.name}.html")
    if job.name == SUMMARY:
        shutil.copyfile(job.params_file, job.out / job.params_file.name)
    elif job.params == (yaml.safe_load(job.params_file.read_text()) or {}):
        shutil.copyfile(job.params_file, job.out / "params.yaml")
    else:  # the command line's overrides merged in: what the study ran with
        write_text(job.out / "params.yaml", f"# {job.params_file} with the command line's "
                   f"overrides\n" + yaml.safe_dump(job.params, sort_keys=False))
    (job.out / ".inputs").write_text(job.digest)


def _notebook_process() -> int:
    """A notebook process (:func:`run_notebooks`): a job per line of its
    stdin, one at a time; for each, a line of JSON on its stdout (``ok``,
    ``failure``), while everything the job prints, papermill's log of its
    cells and the kernel's output included, goes to the job's
    ``.notebook.log``. It ends at the end of its input."""
    def stop(*_):  # SIGTERM from the report: papermill's cleanup shuts the kernel down
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)  # not inherited
    for line in sys.stdin:
        job = json.loads(line)
        job = NotebookJob(**{**job, "out": Path(job["out"]),
                             "params_file": Path(job["params_file"])})
        sys.stdout.flush()
        sys.stderr.flush()
        with open(job.out / ".notebook.log", "w") as log:  # fds 1 and 2: a kernel's too
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            why = _notebook_job(job)
            sys.stdout.flush()
            sys.stderr.flush()
        answer.write(json.dumps({"ok": not why, "failure": why}) + "\n")
    return 0
