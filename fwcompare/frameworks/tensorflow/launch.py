"""How TensorFlow's data-parallel processes are launched (fwcompare.execution.launch
asks): one process per worker with ``TF_CONFIG`` naming the whole cluster
(every worker's host:port) and this worker's index;
``MultiWorkerMirroredStrategy`` connects them. ``ParameterServerStrategy``
(mode ps, one host): a chief, the workers and the parameter servers, each
with its task in ``TF_CONFIG``; the chief runs the steps (its stdout carries
the events), the others serve it until the launch ends them. The same
command whether forked from a fork server or not. Light: nothing here
imports tensorflow."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..base import WORKER_MODULE

# A port per process (no rendezvous: TF_CONFIG lists them all).
RENDEZVOUS = False


def ports_needed(workers: int, servers: int = 0) -> int:
    """Every worker's port (with ``servers`` parameter servers: the chief's,
    the workers', the servers')."""
    return workers + (1 + servers if servers else 0)


def tf_configs(workers: int, hosts: list[str], node_rank: int,
               ports: list[int]) -> list[dict]:
    """TF_CONFIG of each worker on this host: the cluster is every host's
    workers in node order (host i holds workers i*k .. i*k+k-1), ``ports[j]``
    the port of worker ``j``."""
    k = workers // len(hosts)
    cluster = {"worker": [f"{hosts[j // k]}:{ports[j]}" for j in range(workers)]}
    return [{"cluster": cluster, "task": {"type": "worker", "index": node_rank * k + i}}
            for i in range(k)]


def tf_ps_configs(workers: int, servers: int, ports: list[int]) -> list[tuple[str, dict]]:
    """(name, TF_CONFIG) of each process of a ParameterServerStrategy cluster
    on this host: the chief (``ports[0]``), ``workers`` workers and
    ``servers`` parameter servers (the ports after it), in that order."""
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{p}" for p in ports[1:1 + workers]],
               "ps": [f"127.0.0.1:{p}" for p in ports[1 + workers:1 + workers + servers]]}
    return [(f"{kind} {i}" if kind != "chief" else kind,
             {"cluster": cluster, "task": {"type": kind, "index": i}})
            for kind in ("chief", "worker", "ps") for i in range(len(cluster[kind]))]


def commands(job_path: Path, workers: int, hosts: list[str], node_rank: int,
             ports: list[int], forked: bool, servers: int = 0):
    """(command, extra environment) of each process on this host, and their
    names (the ParameterServerStrategy cluster's tasks; none otherwise)."""
    command = [sys.executable, "-m", WORKER_MODULE, str(job_path)]
    if servers:  # workers on cores 0.., the chief and servers on the next ones
        tasks = tf_ps_configs(workers, servers, ports)
        local = [workers, *range(workers), *range(workers + 1, workers + 1 + servers)]
        return [(command, {"TF_CONFIG": json.dumps(c), "LOCAL_RANK": str(i)})
                for (_, c), i in zip(tasks, local)], [name for name, _ in tasks]
    return [(command, {"TF_CONFIG": json.dumps(c), "LOCAL_RANK": str(i)})
            for i, c in enumerate(tf_configs(workers, hosts, node_rank, ports))], []
