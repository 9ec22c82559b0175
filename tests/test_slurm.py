"""Slurm: PAWN joins the processes of one `srun` step into one run through JAX's own Slurm
detection (the variables `srun` sets, read by `jax/_src/clusters/slurm_cluster.py`), and the
sbatch scripts of `examples/slurm/` hold commands PAWN accepts."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pawn.train.distributed import SLURM_VARS, slurm_coordinator

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "slurm"


def _srun_env(job_id: int, ntasks: int, rank: int, nodelist: str = "127.0.0.1") -> dict[str, str]:
    """What srun sets for task ``rank`` of a one-node step (the part JAX and PAWN read)."""
    return {"SLURM_JOB_ID": str(job_id), "SLURM_NTASKS": str(ntasks), "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank), "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_NUM_NODES": "1",
            "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": nodelist, "SLURM_STEP_ID": "0"}


def test_the_coordinator_is_the_first_node_of_the_step_at_the_job_port(monkeypatch):
    for k in (*SLURM_VARS, "JAX_COORDINATOR_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert slurm_coordinator() is None  # not under Slurm
    for k, v in _srun_env(123, 4, 2, "gpu[007-010],cpu3").items():
        monkeypatch.setenv(k, v)
    assert slurm_coordinator() == "gpu007:61563"  # 61440 + 123 mod 4096
    monkeypatch.setenv("SLURM_JOB_ID", str(4096 + 123))
    assert slurm_coordinator() == "gpu007:61563"
    monkeypatch.setenv("JAX_COORDINATOR_PORT", "5555")
    assert slurm_coordinator() == "gpu007:5555"
    monkeypatch.setenv("SLURM_NTASKS", "1")  # a step of one task: nothing to join
    assert slurm_coordinator() is None
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.delenv("SLURM_STEP_NODELIST")  # sbatch's own shell, not an srun task
    assert slurm_coordinator() is None


def _job_id_with_free_port() -> int:
    """A job id whose Slurm coordinator port (61440 + id mod 4096) is free now."""
    for port in range(61440 + os.getpid() % 4000, 65536):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return 10_000 * 4096 + (port - 61440)
    raise RuntimeError("no free port in 61440-65535")


@pytest.mark.slow  # two JAX processes that join and train: ~40-60 s on a shared 2-core machine
def test_two_srun_tasks_join_one_pretraining_run(tmp_path):
    from pawn.runs import open_run

    job = _job_id_with_free_port()
    out = tmp_path / "run"  # one --out on the storage both tasks share
    args = [sys.executable, "-m", "pawn.cli", "pretrain", "--variant", "toy", "--total-steps", "4", "--batch-size", "8",
            "--seq-len", "32", "--val-games", "0", "--steps-per-chunk", "2", "--val-every", "4", "--checkpoint-every",
            "4", "--distributed-timeout-s", "120", "--out", str(out)]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COORDINATOR", "JAX_NUM_PROCESSES",
                                                                        "JAX_PROCESS_ID", "SLURM_"))}
    procs = [subprocess.Popen(args, env={**base, "JAX_PLATFORMS": "cpu", **_srun_env(job, 2, rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=400) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-3000:]
    run = open_run(out)
    cfg = run.config_record.fields
    assert cfg["processes"] == 2 and cfg["devices"] == 2, cfg
    assert [r.step for r in run.train] == [2, 4]
    assert len([r for r in run.all_records() if r.type == "config"]) == 1  # one writer: process 0
    assert not any(tmp_path.glob("run*/../run-*"))


def _pawn_lines(script: Path) -> list[list[str]]:
    """The `pawn ...` command lines of an sbatch script (continuations joined), as argv."""
    text = re.sub(r"\\\n\s*", " ", script.read_text())
    return [shlex.split(line[line.index("pawn "):].split(" &")[0]) for line in text.splitlines()
            if re.search(r"\bpawn (pretrain|sweep|adapt)\b", line) and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name", ["pretrain-one-node.sbatch", "pretrain-multi-node.sbatch", "sweep-workers.sbatch"])
def test_the_sbatch_scripts_are_shell_and_pawn_takes_their_options(name):
    import typer

    from pawn.cli import app

    script = EXAMPLES / name
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert re.search(r"^#SBATCH --nodes=\d+$", script.read_text(), re.M)
    lines = _pawn_lines(script)
    assert lines, f"no pawn command in {script}"
    group = typer.main.get_command(app)
    for argv in lines:
        argv = [a for a in argv[1:] if a != "${STORAGE_ARGS[@]}"]
        argv = [re.sub(r"\$\{?\w+\}?", "1", a) for a in argv]  # shell variables: a value every option takes
        ctx = group.make_context("pawn", [argv[0]])
        cmd = group.get_command(ctx, argv[0])
        cmd.make_context(argv[0], argv[1:])  # raises click.NoSuchOption / BadParameter on a wrong flag
