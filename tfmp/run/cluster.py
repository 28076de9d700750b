"""Where a multi-worker run finds its hosts: `TF_CONFIG`, or the environment Slurm gives each task.

`MultiWorkerMirroredStrategy` learns the cluster (every task's `host:port`)
and this process's place in it (task type and index) from a
`tf.distribute.cluster_resolver.ClusterResolver`. A run's `cluster` setting
(`TrainConfig.cluster`, the scripts' `--cluster`) picks which:

* `tf_config`: `TFConfigClusterResolver`, which reads the `TF_CONFIG`
  environment variable written for each host (`tf_config_example`);
* `slurm`: `SlurmResolver`, TensorFlow's `SlurmClusterResolver` for the
  tasks of one `srun` step: the hosts come from `SLURM_STEP_NODELIST`
  (expanded by `scontrol show hostnames`, or by TensorFlow's own parser
  where `scontrol` is not installed, as in many containers), their task
  counts from `SLURM_STEP_TASKS_PER_NODE`; every task is a `worker`, its index
  `SLURM_PROCID`, and the k-th task of a node listens on `port_base + k`.

Both check the environment first, and a missing or malformed variable is a
`ValueError` naming it, its value and what to do, before TensorFlow starts
a server.

```python
resolver = cluster.resolver("slurm", port_base=8888)
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
```
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import tensorflow as tf

from tfmp.run import _private_apis
from tfmp.run.config import CLUSTERS, SLURM_PORT_BASE

__all__ = ["SlurmResolver", "resolver", "slurm_resolver", "tf_config_example", "tf_config_resolver"]

SRUN_EXAMPLE = "srun python3 scripts/train_gan.py --strategy=multi_worker --cluster=slurm --run_name=NAME ..."
# What each task of an srun step needs; srun sets them all.
SLURM_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")


def tf_config_example(port: int = 12345) -> str:
    """A `TF_CONFIG` for worker 0 of two hosts, as JSON text.

    Args:
        port: The port each worker listens on.
    """
    return json.dumps(
        {
            "cluster": {"worker": [f"host0.example.com:{port}", f"host1.example.com:{port}"]},
            "task": {"type": "worker", "index": 0},
        }
    )


def _tf_config_error(problem: str, received: str | None) -> ValueError:
    slurm = " (Launched by Slurm? Use cluster='slurm' and srun instead.)" if "SLURM_JOB_ID" in os.environ else ""
    return ValueError(
        f"strategy='multi_worker' needs the TF_CONFIG environment variable: JSON naming every task's "
        f"host:port under 'cluster' (a 'worker' list, optionally one 'chief') and this process's role "
        f"under 'task' ('type' and 'index'), the same cluster on every host. Example for worker 0 of two "
        f"hosts: TF_CONFIG='{tf_config_example()}'.{slurm} Problem: {problem}. Received: TF_CONFIG={received!r}"
    )


def _parse_tf_config(text: str | None) -> dict[str, Any]:
    """Checks `TF_CONFIG` text for what MultiWorkerMirroredStrategy needs."""
    if not text:
        raise _tf_config_error("it is not set", text)
    try:
        config = json.loads(text)
    except ValueError as e:
        raise _tf_config_error(f"it is not valid JSON ({e})", text) from None
    if not isinstance(config, dict):
        raise _tf_config_error("it is not a JSON object", text)
    cluster, task_info = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster.get("worker") and not cluster.get("chief"):
        raise _tf_config_error("'cluster' must map 'worker' (and optionally 'chief') to host:port lists", text)
    for role, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) and ":" in a for a in addresses):
            raise _tf_config_error(f"cluster[{role!r}] must be a list of 'host:port' strings", text)
        for address in addresses:
            host, _, port = address.rpartition(":")
            # TensorFlow's server would otherwise fail deep inside with "Could not parse port".
            if not host or not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
                raise _tf_config_error(
                    f"cluster[{role!r}] holds {address!r}: the port must be a number from 1 to 65535", text
                )
    if not isinstance(task_info, dict) or "type" not in task_info or "index" not in task_info:
        raise _tf_config_error("'task' must hold this process's 'type' and 'index'", text)
    role, index = task_info["type"], task_info["index"]
    if role not in cluster or not isinstance(index, int) or not 0 <= index < len(cluster[role]):
        raise _tf_config_error(f"task {role}:{index} is not in the cluster", text)
    return config


def tf_config_resolver() -> tf.distribute.cluster_resolver.TFConfigClusterResolver:
    """TensorFlow's resolver of `TF_CONFIG`, once the variable is checked.

    Raises:
        ValueError: `TF_CONFIG` missing or malformed, naming the problem
            and the text received, with an example.
    """
    _parse_tf_config(os.environ.get("TF_CONFIG"))
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def _slurm_error(name: str, problem: str) -> ValueError:
    return ValueError(
        f"cluster='slurm' reads each worker's place from the environment srun gives the tasks of a job step "
        f"({', '.join(SLURM_VARIABLES)}), and {name} {problem}. Start every worker with srun inside an "
        f"allocation (sbatch or salloc), e.g. `{SRUN_EXAMPLE}`, or use cluster='tf_config' with a TF_CONFIG "
        f"per host. Received: {name}={os.environ.get(name)!r}"
    )


def _slurm_int(name: str, minimum: int) -> int:
    text = os.environ.get(name)
    if text is None:
        raise _slurm_error(name, "is not set: this process is not a task of an srun step")
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < minimum:
        raise _slurm_error(name, f"must be an integer >= {minimum}")
    return int(text)


def _slurm_text(name: str) -> str:
    text = os.environ.get(name)
    if not text or not text.strip():
        raise _slurm_error(name, "is not set: this process is not a task of an srun step")
    return text.strip()


def _hostnames(nodelist: str) -> list[str]:
    """The hosts of a Slurm host list (`node[01-02],gpu7`), in order: Slurm's own expansion where installed."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        try:
            return _private_apis.expand_slurm_hostlist(nodelist)
        except ValueError as e:
            raise _slurm_error(
                "SLURM_STEP_NODELIST", f"could not be expanded without scontrol, which is not on PATH ({e})"
            ) from None
    try:
        done = subprocess.run(
            [scontrol, "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise _slurm_error("SLURM_STEP_NODELIST", f"could not be expanded: {scontrol} failed ({e})") from None
    if done.returncode:
        raise _slurm_error(
            "SLURM_STEP_NODELIST",
            f"could not be expanded: `{scontrol} show hostnames` exited {done.returncode} "
            f"({(done.stderr or done.stdout).strip()!r})",
        )
    return done.stdout.split()


def _gpus_on_node() -> tuple[int, list[str] | None]:
    """The number of GPUs this node shows its tasks, and `CUDA_VISIBLE_DEVICES`' list if that is set.

    TensorFlow's own count runs `nvidia-smi` when `CUDA_VISIBLE_DEVICES` is
    not set (a crash where it is not installed) and counts an empty
    `CUDA_VISIBLE_DEVICES` as one GPU.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        # CUDA stops at the first invalid entry ("-1" hides every GPU).
        devices = []
        for device in visible.split(","):
            if not device.strip() or device.strip().startswith("-"):
                break
            devices.append(device.strip())
        return len(devices), devices
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return 0, None
    done = subprocess.run([nvidia_smi, "--list-gpus"], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode:
        raise ValueError(
            f"cluster='slurm' counts this node's GPUs with `nvidia-smi --list-gpus`, which exited "
            f"{done.returncode} ({(done.stderr or done.stdout).strip()!r}). Set CUDA_VISIBLE_DEVICES to the GPUs "
            f"to use ('' for none), or fix the driver. Received: CUDA_VISIBLE_DEVICES=None"
        )
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines()), None


class SlurmResolver(tf.distribute.cluster_resolver.SlurmClusterResolver):
    """TensorFlow's `SlurmClusterResolver`, also on nodes without GPUs, and keeping Slurm's GPU binding.

    TensorFlow's `cluster_spec()` gives each task of a node its own slot of
    `gpus_per_task` GPUs and fails with none (`range()` with a step of 0):
    here a CPU-only cluster gets the same addresses (hosts sorted by name,
    the k-th task of a node on `port_base + k`) and no GPUs. With GPUs it
    is TensorFlow's, except that a task's share is taken from the devices
    `CUDA_VISIBLE_DEVICES` listed at start (Slurm's binding), not from
    device numbers 0, 1, ...; with one task per node, or GPUs that Slurm
    bound per task (`srun --gpus-per-task`), each task keeps them untouched.
    Build it with `slurm_resolver`, which checks the environment.
    """

    def __init__(self, *, visible_devices: list[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._visible_devices = visible_devices

    def cluster_spec(self) -> tf.train.ClusterSpec:
        if self._gpus_per_task:
            spec = super().cluster_spec()
            if self._auto_set_gpu and self._visible_devices is not None:
                share = [int(i) for i in self._gpu_allocation[self._rank].split(",") if i]
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self._visible_devices[i] for i in share)
            return spec
        # TensorFlow's assignment (sorted hosts, then jobs in sorted order), without GPU slots.
        tasks = [
            f"{host}:{self._port_base + offset}"
            for host, count in sorted(self._task_configuration.items())
            for offset in range(count)
        ]
        self._cluster_allocation, start = {}, 0
        for task_type, count in sorted(self._jobs.items()):
            self._cluster_allocation[task_type] = tasks[start : start + count]
            if start <= self._rank < start + count:
                self.task_type, self.task_id = task_type, self._rank - start
            start += count
        return tf.train.ClusterSpec(self._cluster_allocation)


def slurm_resolver(port_base: int = SLURM_PORT_BASE) -> SlurmResolver:
    """The resolver of the srun step this process is a task of, its environment checked.

    Every task is a `worker`; worker 0 (`SLURM_PROCID=0`) is the chief.

    Args:
        port_base: The port of each node's first task; the k-th task of a
            node listens on `port_base + k`.

    Returns:
        A `SlurmResolver` whose `cluster_spec()` has been resolved.

    Raises:
        ValueError: a Slurm variable missing or malformed, a host list
            `scontrol` cannot expand, task counts that disagree, a port
            beyond 65535, or a task that Slurm placed elsewhere than the
            resolver assumes (see `_check_placement`), naming the variable
            and its value.
    """
    rank = _slurm_int("SLURM_PROCID", minimum=0)
    num_tasks = _slurm_int("SLURM_STEP_NUM_TASKS", minimum=1)
    hosts = _hostnames(_slurm_text("SLURM_STEP_NODELIST"))
    try:
        counts = _private_apis.expand_slurm_tasks_per_node(_slurm_text("SLURM_STEP_TASKS_PER_NODE"))
    except ValueError as e:
        raise _slurm_error("SLURM_STEP_TASKS_PER_NODE", f"is not a task count list such as '2(x3),1' ({e})") from None
    if rank >= num_tasks:
        raise _slurm_error("SLURM_PROCID", f"must be below SLURM_STEP_NUM_TASKS={num_tasks}")
    if len(hosts) != len(counts) or len(set(hosts)) != len(hosts) or sum(counts) != num_tasks:
        raise _slurm_error(
            "SLURM_STEP_TASKS_PER_NODE",
            f"must give one task count per host of SLURM_STEP_NODELIST ({len(hosts)} hosts: {hosts}), adding up "
            f"to SLURM_STEP_NUM_TASKS={num_tasks}",
        )
    if port_base + max(counts) - 1 > 65535:
        raise ValueError(
            f"cluster='slurm' gives the k-th task of a node the port slurm_port_base + k, beyond 65535 with "
            f"{max(counts)} tasks on a node: choose a lower slurm_port_base. Received: slurm_port_base={port_base}"
        )
    gpus, visible = _gpus_on_node()
    per_node = max(counts)
    if os.environ.get("SLURM_GPUS_PER_TASK"):
        # srun --gpus-per-task: Slurm gave each task its own GPUs already; each keeps what it sees.
        gpus_per_node, gpus_per_task, split = gpus * per_node, gpus, False
    else:
        # Every task of a node sees all of its GPUs: split them evenly, as SlurmClusterResolver does.
        gpus_per_node, gpus_per_task, split = gpus, gpus // per_node, per_node > 1
        if gpus and not gpus_per_task:
            raise _slurm_error(
                "SLURM_STEP_TASKS_PER_NODE",
                f"puts {per_node} tasks on a node whose {gpus} GPU(s) cannot give each task one: start at most "
                f"{gpus} tasks per node (--ntasks-per-node), or let srun bind them (--gpus-per-task)",
            )
    resolver = SlurmResolver(
        jobs={"worker": num_tasks},
        port_base=port_base,
        gpus_per_node=gpus_per_node,
        gpus_per_task=gpus_per_task,
        tasks_per_node=dict(zip(hosts, counts)),
        # Otherwise each task keeps every GPU Slurm bound to it, as listed.
        auto_set_gpu=split,
        visible_devices=visible,
    )
    resolver.cluster_spec()  # sets task_type and task_id
    _check_placement(resolver, rank)
    return resolver


def _check_placement(resolver: SlurmResolver, rank: int) -> None:
    """Checks that this task runs where the resolver's cluster puts it.

    `SlurmClusterResolver` puts task ranks on hosts in sorted name order,
    filling each host before the next (block distribution). Slurm places
    them in its node order (where `node10` follows `node9`) and may deal
    them round-robin (`srun --distribution=cyclic`). A task elsewhere than
    its address would listen for another task's peers, and the workers
    would wait for each other forever; `SLURMD_NODENAME` and
    `SLURM_LOCALID`, which srun sets, tell.
    """
    host, _, port = resolver.cluster_spec().task_address(resolver.task_type, resolver.task_id).rpartition(":")
    node, local_id = os.environ.get("SLURMD_NODENAME"), os.environ.get("SLURM_LOCALID")
    expected_local = int(port) - resolver._port_base
    if (node is not None and node != host) or (local_id is not None and local_id.strip() != str(expected_local)):
        raise ValueError(
            f"Slurm placed task SLURM_PROCID={rank} on SLURMD_NODENAME={node!r} as its local task "
            f"SLURM_LOCALID={local_id!r}, but SlurmClusterResolver gives it {host}:{port} (local task "
            f"{expected_local}): it puts tasks on hosts in sorted name order, each host filled before the next. "
            "Launch with `srun --distribution=block` and host names that sort in Slurm's order (zero-padded "
            "numbers), or use cluster='tf_config'."
        )


def resolver(cluster: str, port_base: int = SLURM_PORT_BASE) -> tf.distribute.cluster_resolver.ClusterResolver:
    """The cluster resolver a run's `cluster` setting names (`tf_config` or `slurm`).

    Args:
        cluster: One of `CLUSTERS`: `"tf_config"` or `"slurm"`.
        port_base: For `slurm`: the port of each node's first task.

    Raises:
        ValueError: an unknown `cluster`, or an environment that does not
            describe a cluster (see `tf_config_resolver`, `slurm_resolver`).
    """
    if cluster == "tf_config":
        return tf_config_resolver()
    if cluster == "slurm":
        return slurm_resolver(port_base)
    raise ValueError(f"Unknown cluster. Valid: {', '.join(CLUSTERS)}. Received: cluster={cluster!r}")
