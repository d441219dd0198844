"""How PyTorch's data-parallel ranks are launched (fwcompare.execution.launch asks):
``torchrun`` (``python -m torch.distributed.run``) with a static rendezvous
at ``MASTER_ADDR:MASTER_PORT``, or, forked from a fork server, each rank with
the variables torchrun would set. Light: nothing here imports torch."""
from __future__ import annotations

import sys
from pathlib import Path

from ..base import WORKER_MODULE

# One port for the whole launch: torchrun's rendezvous (rank 0's store).
RENDEZVOUS = True


def ports_needed(workers: int, servers: int = 0) -> int:
    return 1


def torchrun_command(job_path: Path, workers: int, hosts: list[str], node_rank: int,
                     master_port: int) -> list[str]:
    """torchrun for this host's share of ``workers`` ranks (static rendezvous)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
            "--node_rank", str(node_rank), "--nproc_per_node", str(workers // len(hosts)),
            "--master_addr", hosts[0], "--master_port", str(master_port),
            "--max_restarts", "0", "-m", WORKER_MODULE, str(job_path)]


def torch_rank_envs(workers: int, hosts: list[str], node_rank: int,
                    master_port: int) -> list[dict]:
    """What torchrun's static rendezvous gives each rank on this host
    (``torch.distributed``'s env:// variables), for ranks forked from a fork
    server instead: rank 0 serves the store at ``MASTER_ADDR:MASTER_PORT``."""
    k = workers // len(hosts)
    return [{"RANK": str(node_rank * k + i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(workers),
             "LOCAL_WORLD_SIZE": str(k), "GROUP_RANK": str(node_rank),
             "MASTER_ADDR": hosts[0], "MASTER_PORT": str(master_port)} for i in range(k)]


def commands(job_path: Path, workers: int, hosts: list[str], node_rank: int,
             ports: list[int], forked: bool, servers: int = 0):
    """(command or None where forked, extra environment) of each process on
    this host, and their names (none: ranks by number): one per rank when
    forked, torchrun's one for all of them otherwise."""
    if forked:
        return [(None, e) for e in torch_rank_envs(workers, hosts, node_rank, ports[0])], []
    return [(torchrun_command(job_path, workers, hosts, node_rank, ports[0]), {})], []
