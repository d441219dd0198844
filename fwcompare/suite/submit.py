"""A sharded sweep submitted to a cluster: ``fwcompare submit STUDY --shards N``.

Each shard (:mod:`fwcompare.suite.shard`) runs as one job through submitit (Slurm,
or local processes to try it), the parent waits for all of them, cancels the
rest on Ctrl-C or a failure, and merges their stores when every one finished.
"""
from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import Callable

from .shard import SHARDS_DIR, Merged, Shard, ShardError, merge, run_shard, shard_dir, units


def _shard_job(study: str, params: dict, shard: str, profile: str, output_dir: str,
               study_file: str) -> dict:
    """What a submitted job runs: :func:`run_shard`, as ``fwcompare run STUDY
    --shard I/N`` does; returns the count of each status. SIGTERM (Slurm's
    cancel and time limit; submitit would only log it) stops the run as
    Ctrl-C does, through the runner's clean-up: no worker is left."""
    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    res = run_shard(study, params, Shard.parse(shard), output_dir=output_dir, profile=profile,
                    study_file=study_file)
    return {str(k): int(v) for k, v in res.results["status"].value_counts().items()}


def _last_error(exc: BaseException) -> str:
    """The line that names a job's error: the last of the trace submitit
    puts between two dashed lines, or the message itself."""
    text = str(exc)
    parts = text.split("----------------------\n")
    trace = parts[1] if len(parts) >= 3 else text
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def _pause(seconds: float) -> None:  # the wait between polls (a test makes it Ctrl-C)
    time.sleep(seconds)


def _cancel(jobs: list, grace_s: float = 60.0) -> None:
    """Stop every job not done and wait up to ``grace_s`` for them to end.

    A Slurm job is cancelled (``scancel``: SIGTERM, then SIGKILL after the
    cluster's KillWait; its cgroup takes every process it started). A local
    job's controller gets SIGTERM, which it passes on to the shard: the
    shard's runner then kills its workers and fork servers on its way out
    (submitit's own ``cancel`` gives it one second before SIGKILL, too short
    for a fork server still importing); one still running after
    ``grace_s`` is cancelled, then killed."""
    live = [j for j in jobs if not j.done()]
    for j in live:
        proc = getattr(j, "_process", None)  # submitit's LocalJob: its controller's Popen
        try:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
            else:
                j.cancel(check=False)
        except Exception:  # noqa: BLE001 -- stop the others all the same
            pass
    end = time.monotonic() + grace_s
    while live and time.monotonic() < end:
        live = [j for j in live if not j.done()]
        if live:
            time.sleep(0.2)
    for j in live:
        proc = getattr(j, "_process", None)
        if proc is not None and proc.poll() is None:
            j.cancel(check=False)  # SIGINT: the controller kills the shard
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                proc.kill()
                proc.wait()


def wait_all(jobs: list, shards: list[Shard], *, poll_s: float = 10.0,
             log: Callable[[str], None] = print) -> dict[Shard, dict]:
    """Wait for every job, printing each state change and each shard that
    finishes; when one fails (or Ctrl-C, or anything else stops the wait)
    every other is cancelled before the error goes on."""
    pending = dict(zip(shards, jobs))
    states: dict[Shard, str] = {}
    done: dict[Shard, dict] = {}
    t0 = time.monotonic()
    try:
        while pending:
            for shard, job in list(pending.items()):
                state = str(job.state)
                if states.get(shard) != state and not job.done():
                    states[shard] = state
                    log(f"shard {shard}: {state.lower()} (job {job.job_id})")
                if not job.done():
                    continue
                del pending[shard]
                exc = job.exception()
                if exc is not None:
                    why = _last_error(exc)
                    if "timed-out" in why:
                        why += (" (--timeout-min reached: submit again with more; the "
                                "shards' finished cells are kept)")
                    raise ShardError(f"shard {shard} failed (job {job.job_id}): {why}\n"
                                     f"  its log: {job.paths.stderr}")
                done[shard] = job.result()
                mins = (time.monotonic() - t0) / 60
                log(f"shard {shard} finished ({len(done)}/{len(shards)} done, "
                    f"{mins:.1f} min): {done[shard]}")
            if pending:
                _pause(poll_s)
    except BaseException:
        left = [j for j in pending.values()]
        if left:
            log(f"cancelling {len(left)} shard job(s): "
                + ", ".join(f"{s} ({j.job_id})" for s, j in pending.items()))
        _cancel(left)
        raise
    return done


def make_executor(folder: Path, executor: str, *, name: str, partition: str | None = None,
                  gpus_per_node: int | None = None, cpus_per_task: int | None = None,
                  exclusive: bool = False, timeout_min: int = 240):
    """submitit's executor for the shard jobs: ``slurm`` or ``local``; its
    logs and pickles under ``folder/<job id>``."""
    import submitit

    ex = submitit.AutoExecutor(folder=Path(folder) / "%j", cluster=executor)
    settings: dict = {"timeout_min": timeout_min, "name": name}
    if gpus_per_node is not None:
        settings["gpus_per_node"] = gpus_per_node
    if cpus_per_task is not None:
        settings["cpus_per_task"] = cpus_per_task
    if partition:
        settings["slurm_partition"] = partition
    if exclusive:
        settings["slurm_exclusive"] = True
    ex.update_parameters(**settings)
    return ex


def submit(study: str, params: dict | None, count: int, *, out: Path | str,
           profile: str = "adhoc", executor: str = "slurm", partition: str | None = None,
           gpus_per_node: int | None = None, cpus_per_task: int | None = None,
           exclusive: bool = False,
           timeout_min: int = 240, poll_s: float = 10.0, study_file: str = "",
           log: Callable[[str], None] = print) -> Merged:
    """Run ``count`` shards as jobs (Slurm or submitit's local executor),
    wait for them, merge them into ``out``."""
    from .. import studies
    from .api import run_plan
    from .params import study_named, validate

    if study_file:
        studies.load(study, study_file)
    params = validate(study, params or {}, source=f"{study} params")
    if count < 1:
        raise ShardError(f"--shards {count}: must be at least 1")
    n_units = len(units(run_plan(study, params)))
    if count > n_units:
        hint = (" (schedule: sequential cuts a study into its worker groups, interleaved "
                "into its models)" if study_named(study).schedule(params, study_named(study).tasks[0])
                == "interleaved" else "")
        raise ShardError(f"--shards {count}: {study} with these params has {n_units} "
                         f"unit{'s' if n_units != 1 else ''} (cells that share a process or an "
                         f"interleaved set), so at most {n_units} shard"
                         f"{'s' if n_units != 1 else ''}{hint}")
    if executor not in ("slurm", "local"):
        raise ShardError(f"--executor {executor}: slurm or local")
    if executor == "slurm" and not shutil.which("sbatch"):
        raise ShardError("no Slurm here (sbatch not found): run this on the cluster's login "
                         "node, or --executor local to run the shards as processes here")
    out = Path(out)
    shards = [Shard(i, count) for i in range(1, count + 1)]
    dirs = [shard_dir(out, s) for s in shards]
    ex = make_executor(out / SHARDS_DIR / "submitit", executor, name=f"fwcompare-{study}",
                       partition=partition, gpus_per_node=gpus_per_node,
                       cpus_per_task=cpus_per_task, exclusive=exclusive,
                       timeout_min=timeout_min)
    n = len(shards)
    # Plain values to the jobs (pickled into other processes, where the typed
    # class is made anew): each job's run_shard checks them, its own entry.
    jobs = ex.map_array(_shard_job, [study] * n, [dict(params)] * n, [str(s) for s in shards],
                        [profile] * n, [str(d) for d in dirs], [study_file] * n)
    log(f"submitted {n} shard jobs of {study} ({executor}): "
        + ", ".join(f"{s} ({j.job_id})" for s, j in zip(shards, jobs)))
    wait_all(jobs, shards, poll_s=poll_s, log=log)
    return merge(out, dirs)
