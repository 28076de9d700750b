"""Tests for tfmp/run/cluster.py: where a multi-worker run finds its hosts, TF_CONFIG or Slurm's srun environment.

Slurm is played by its environment variables and a stand-in `scontrol` put
first on PATH, which prints the host list (and records how it was called);
the slow test launches two local worker processes the way `srun` would.
"""

import os
import re
import socket
import stat
import time
import types

import numpy as np
import pytest
import tensorflow as tf
import workers

from tfmp.run import cluster, distribute

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLURM_VARIABLES = (
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURMD_NODENAME",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "TF_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_GPUS_PER_TASK",
)


def _fake_scontrol(folder, hosts):
    """An executable `scontrol` in `folder` that prints `hosts` for `show hostnames` and logs its arguments."""
    folder.mkdir(exist_ok=True)
    log = folder / "scontrol.log"
    script = folder / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        'if [ "$1" != show ] || [ "$2" != hostnames ]; then echo "scontrol: invalid entity: $1" >&2; exit 1; fi\n'
        + "".join(f"echo {host}\n" for host in hosts)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return log


@pytest.fixture
def slurm(monkeypatch, tmp_path):
    """Sets a Slurm task's environment: `slurm(procid=1, nodelist=..., tasks_per_node=..., hosts=[...])`.

    PATH holds only the stand-in scontrol (no nvidia-smi), so the node has no GPU.
    """
    for name in SLURM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    bin_dir = tmp_path / "bin"

    def set_up(procid=0, num_tasks=2, nodelist="localhost", tasks_per_node="2", hosts=("localhost",), **extra):
        log = _fake_scontrol(bin_dir, hosts) if hosts is not None else None
        bin_dir.mkdir(exist_ok=True)
        monkeypatch.setenv("PATH", str(bin_dir))
        values = {
            "SLURM_JOB_ID": "4242",
            "SLURM_PROCID": procid,
            "SLURM_STEP_NUM_TASKS": num_tasks,
            "SLURM_STEP_NODELIST": nodelist,
            "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
            **extra,
        }
        for name, value in values.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
        return log

    return set_up


def _as_strategy(resolver):
    return types.SimpleNamespace(cluster_resolver=resolver, num_replicas_in_sync=1)


# --- the Slurm resolver ---------------------------------------------------------------


def test_two_tasks_on_one_node_are_workers_on_consecutive_ports_and_task_0_is_the_chief(slurm):
    for procid in (0, 1):
        log = slurm(procid=procid, SLURMD_NODENAME="localhost", SLURM_LOCALID=procid)
        resolver = cluster.slurm_resolver(port_base=20000)
        assert isinstance(resolver, tf.distribute.cluster_resolver.SlurmClusterResolver)
        assert resolver.cluster_spec().as_dict() == {"worker": ["localhost:20000", "localhost:20001"]}
        assert (resolver.task_type, resolver.task_id) == ("worker", procid)
        assert resolver.num_accelerators() == {"GPU": 0}
        strategy = _as_strategy(resolver)
        assert distribute.task(strategy) == ("worker", procid)
        assert distribute.is_chief(strategy) is (procid == 0)
    assert log.read_text().splitlines() == ["show hostnames localhost"] * 2  # Slurm's own expansion was asked


def test_the_host_list_comes_from_scontrol_in_its_order_with_tasks_counted_per_node(slurm):
    # scontrol, not TensorFlow's parser, turns the compressed list into names.
    log = slurm(
        procid=3, num_tasks=5, nodelist="gpu[7-8],cpu01", tasks_per_node="2(x2),1", hosts=["gpu7", "gpu8", "a1"]
    )
    resolver = cluster.slurm_resolver()
    assert resolver.cluster_spec().as_dict() == {
        "worker": ["a1:8888", "gpu7:8888", "gpu7:8889", "gpu8:8888", "gpu8:8889"]
    }
    assert (resolver.task_type, resolver.task_id) == ("worker", 3)
    assert log.read_text() == "show hostnames gpu[7-8],cpu01\n"


def test_without_scontrol_tensorflows_own_parser_expands_the_host_list(slurm):
    slurm(procid=2, num_tasks=3, nodelist="node[01-03]", tasks_per_node="1(x3)", hosts=None)
    resolver = cluster.slurm_resolver(port_base=9000)
    assert resolver.cluster_spec().as_dict() == {"worker": ["node01:9000", "node02:9000", "node03:9000"]}
    assert resolver.task_id == 2


@pytest.mark.parametrize(
    "missing", ["SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"]
)
def test_a_missing_slurm_variable_is_named_with_what_to_do(slurm, monkeypatch, missing):
    slurm()
    monkeypatch.delenv(missing)
    with pytest.raises(ValueError) as error:
        cluster.slurm_resolver()
    message = str(error.value)
    assert f"{missing} is not set" in message
    assert "srun" in message and "cluster='tf_config'" in message
    assert message.endswith(f"Received: {missing}=None")


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"procid": "one"}, "SLURM_PROCID must be an integer >= 0. Start every worker with srun"),
        ({"procid": 2}, "SLURM_PROCID must be below SLURM_STEP_NUM_TASKS=2"),
        ({"num_tasks": 0}, "Received: SLURM_STEP_NUM_TASKS='0'"),
        ({"tasks_per_node": "two"}, "SLURM_STEP_TASKS_PER_NODE is not a task count list"),
        ({"tasks_per_node": "1"}, "adding up to SLURM_STEP_NUM_TASKS=2. Start"),
        # One count for two hosts: TensorFlow would silently drop the second host.
        ({"hosts": ["n1", "n2"], "tasks_per_node": "2"}, "one task count per host of SLURM_STEP_NODELIST (2 hosts"),
    ],
)
def test_inconsistent_slurm_variables_are_refused_naming_them(slurm, change, expected):
    slurm(**change)
    with pytest.raises(ValueError) as error:
        cluster.slurm_resolver()
    assert expected in str(error.value)
    assert "Received: SLURM_" in str(error.value)


def test_a_failing_scontrol_is_named_with_its_message(slurm, tmp_path):
    slurm()
    (tmp_path / "bin" / "scontrol").write_text(
        "#!/bin/sh\necho 'scontrol: error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    with pytest.raises(ValueError, match=r"show hostnames` exited 1 \('scontrol: error: Unable to contact"):
        cluster.slurm_resolver()


def test_a_task_placed_elsewhere_than_the_resolver_assumes_is_refused(slurm):
    # Slurm orders node9 before node10 and gives it task 0; TensorFlow sorts the names, so node10 comes first.
    slurm(procid=0, nodelist="node[9-10]", tasks_per_node="1(x2)", hosts=["node9", "node10"], SLURMD_NODENAME="node9")
    with pytest.raises(ValueError) as error:
        cluster.slurm_resolver()
    assert "SLURM_PROCID=0 on SLURMD_NODENAME='node9'" in str(error.value)
    assert "gives it node10:8888" in str(error.value) and "--distribution=block" in str(error.value)
    # Round-robin placement: task 1 is node A's second task, not its first.
    slurm(procid=1, nodelist="localhost", SLURMD_NODENAME="localhost", SLURM_LOCALID=0)
    with pytest.raises(ValueError, match="SLURM_LOCALID='0', but SlurmClusterResolver gives it localhost:8889"):
        cluster.slurm_resolver()


def test_ports_beyond_65535_are_refused(slurm):
    slurm()
    with pytest.raises(ValueError, match="choose a lower slurm_port_base. Received: slurm_port_base=65535"):
        cluster.slurm_resolver(port_base=65535)


def test_gpus_are_shared_out_from_slurms_own_binding(slurm, monkeypatch):
    # Slurm bound GPUs 2 and 3 to this node's two tasks; TensorFlow alone would hand out 0 and 1.
    slurm(procid=1, CUDA_VISIBLE_DEVICES="2,3")
    resolver = cluster.slurm_resolver()
    assert resolver.num_accelerators() == {"GPU": 1}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    # One task per node keeps all of its GPUs, untouched.
    slurm(procid=1, tasks_per_node="1(x2)", nodelist="n[1-2]", hosts=["n1", "n2"], CUDA_VISIBLE_DEVICES="2,3")
    assert cluster.slurm_resolver().num_accelerators() == {"GPU": 2}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    # An empty list hides every GPU (TensorFlow would count one).
    slurm(CUDA_VISIBLE_DEVICES="")
    assert cluster.slurm_resolver().num_accelerators() == {"GPU": 0}
    # srun --gpus-per-task=1 bound one GPU to each task: it keeps it.
    slurm(procid=1, CUDA_VISIBLE_DEVICES="5", SLURM_GPUS_PER_TASK="1")
    assert cluster.slurm_resolver().num_accelerators() == {"GPU": 1}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    # Two tasks sharing one GPU: refused rather than run on CPUs.
    slurm(CUDA_VISIBLE_DEVICES="0", SLURM_GPUS_PER_TASK=None)
    with pytest.raises(ValueError, match=r"puts 2 tasks on a node whose 1 GPU\(s\) cannot give each task one"):
        cluster.slurm_resolver()


def test_resolver_names_the_cluster_setting(slurm, monkeypatch):
    slurm()
    assert isinstance(cluster.resolver("slurm"), cluster.SlurmResolver)
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}')
    assert cluster.resolver("tf_config").cluster_spec().as_dict() == {"worker": ["a:1"]}
    with pytest.raises(ValueError, match=r"Valid: tf_config, slurm\. Received: cluster='pbs'"):
        cluster.resolver("pbs")


def test_a_missing_tf_config_under_slurm_points_to_the_slurm_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with pytest.raises(ValueError, match=r"Use cluster='slurm' and srun instead.*Received: TF_CONFIG=None"):
        distribute.make_strategy("multi_worker")


def test_a_cluster_with_another_strategy_is_refused():
    with pytest.raises(ValueError, match=r"Received: strategy='mirrored', cluster='slurm'"):
        distribute.make_strategy("mirrored", cluster="slurm")


# --- two local workers launched as srun would -----------------------------------------


def _free_port_base(count):
    """A port p such that p .. p + count - 1 are free now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no run of free ports found")


@pytest.mark.slow
def test_two_srun_tasks_train_the_classifier_from_slurms_environment_and_end_identical(tmp_path):
    log = _fake_scontrol(tmp_path / "bin", ["localhost"])
    port_base = _free_port_base(2)
    logdir = tmp_path / "logs"
    flags = [
        "--strategy=multi_worker",
        "--cluster=slurm",
        f"--slurm_port_base={port_base}",
        "--dataset=digits",
        "--alpha=0.35",
        "--batch_size=16",
        "--epochs=1",
        "--steps_per_epoch=2",
        "--warmup_steps=0",
        "--precision=float32",
        f"--logdir={logdir}",
        "--run_name=slurm",
    ]
    base_env = {k: v for k, v in os.environ.items() if k not in SLURM_VARIABLES}

    def slurm_task(procid):
        return dict(
            PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            # What srun -N1 -n2 sets for each task on node `localhost`.
            SLURM_JOB_ID="4242",
            SLURM_PROCID=str(procid),
            SLURM_LOCALID=str(procid),
            SLURM_STEP_NUM_TASKS="2",
            SLURM_STEP_NODELIST="localhost",
            SLURM_STEP_TASKS_PER_NODE="2",
            SLURMD_NODENAME="localhost",
        )

    started = time.monotonic()
    outputs = workers.Workers(tmp_path, flags, environment=slurm_task, base=base_env).wait()
    print(f"two Slurm workers: {time.monotonic() - started:.1f} s")
    for code, out in outputs:
        assert code == 0, out[-3000:]
        assert "strategy=multi_worker replicas=2" in out
    assert log.read_text().splitlines() == ["show hostnames localhost"] * 2
    epoch_lines = [
        [re.sub(r", images_per_sec \S+", "", line) for line in out.splitlines() if line.startswith("epoch 1/1")]
        for _, out in outputs
    ]
    assert epoch_lines[0] == epoch_lines[1] and len(epoch_lines[0]) == 1

    # Task 0 is the chief and wrote the run's checkpoint; task 1 wrote the same state to its private copy.
    worker_1_run = tmp_path / "tmp1" / "tfmp_workertemp_worker_1" / str(logdir / "slurm").lstrip(os.sep)
    chief_state = workers.latest_checkpoint(str(logdir / "slurm" / "checkpoints"))
    worker_state = workers.latest_checkpoint(str(worker_1_run / "checkpoints"))
    assert chief_state.keys() == worker_state.keys()
    assert sum(np.size(value) for value in chief_state.values()) > 100_000
    for key, value in chief_state.items():
        np.testing.assert_array_equal(worker_state[key], value, err_msg=key)
