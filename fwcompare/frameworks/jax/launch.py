"""How JAX's data-parallel ranks are launched (fwcompare.execution.launch asks): one
process per rank with the coordinator's address (rank 0's host), the process
count and this process's id, for ``jax.distributed.initialize``
(``parallel.DataParallel``); forked from a fork server where there is one.
Light: nothing here imports jax."""
from __future__ import annotations

import sys
from pathlib import Path

from ..base import WORKER_MODULE
from . import COORDINATOR_ENV, PROCESS_ID_ENV, PROCESSES_ENV

# One port for the whole launch: the coordinator's (process 0's).
RENDEZVOUS = True


def ports_needed(workers: int, servers: int = 0) -> int:
    return 1


def jax_rank_envs(workers: int, hosts: list[str], node_rank: int, port: int) -> list[dict]:
    """What ``parallel.DataParallel`` reads on each rank of this host: the
    coordinator (served by process 0, on ``hosts[0]``), the process count
    and this process's id (host i holds processes i*k .. i*k+k-1)."""
    k = workers // len(hosts)
    return [{COORDINATOR_ENV: f"{hosts[0]}:{port}", PROCESSES_ENV: str(workers),
             PROCESS_ID_ENV: str(node_rank * k + i), "LOCAL_RANK": str(i)} for i in range(k)]


def commands(job_path: Path, workers: int, hosts: list[str], node_rank: int,
             ports: list[int], forked: bool, servers: int = 0):
    """(command or None where forked, extra environment) of each rank on this
    host, and their names (none: ranks by number)."""
    command = [sys.executable, "-m", WORKER_MODULE, str(job_path)]
    return [(None if forked else command, e)
            for e in jax_rank_envs(workers, hosts, node_rank, ports[0])], []
