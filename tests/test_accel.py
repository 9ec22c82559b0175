"""An NVIDIA GPU or a TPU that the installed JAX cannot use is named in one warning line with the
install line (`pawn pretrain`, `adapt`, `sweep`, `bench`); `pawn doctor` prints JAX's version,
backend and devices; `pawn --version` the JAX version. The GPU is stood in for by an `nvidia-smi`
on PATH that prints what the real one prints for `-L` (this machine has none)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pawn.cli import _accel

H200 = "GPU 0: NVIDIA H200 (UUID: GPU-3a1b0c52-7c2d-4e1f-9a0b-1c2d3e4f5a6b)"


def _fake_smi(bindir: Path, rc: int = 0) -> Path:
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 9\necho '{H200}'\nexit {rc}\n")
    exe.chmod(0o755)
    return bindir


def _pawn(*args: str, path_prefix: Path | None = None, **env_extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", **env_extra}
    env.pop("JAX_PLATFORMS", None)
    env.update(env_extra)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    return subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'pawn'; from pawn.cli import run; run()", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("warning: this machine has")]


def test_a_gpu_that_jax_cannot_use_is_one_warning_line_naming_the_install(tmp_path):
    bindir = _fake_smi(tmp_path / "bin")
    p = _pawn("pretrain", "--variant", "toy", "--total-steps", "2", "--dry-run", "--out", str(tmp_path / "run"), path_prefix=bindir)
    assert p.returncode == 0, p.stderr
    warn = _warnings(p.stderr)
    assert len(warn) == 1, p.stderr
    assert "1 NVIDIA GPU(s)" in warn[0] and "pip install '.[cuda12]'" in warn[0] and "jax.devices()" in warn[0]
    # the run itself goes on (on the CPU): the plan line still says so
    assert "1 cpu device(s)" in p.stdout + p.stderr


@pytest.mark.parametrize("args", [("sweep", "--bogus"), ("adapt", "--bogus"), ("bench", "--bogus")])
def test_every_training_command_warns(tmp_path, args):
    p = _pawn(*args, path_prefix=_fake_smi(tmp_path / "bin"))
    assert len(_warnings(p.stderr)) == 1, p.stderr


def test_no_warning_without_a_gpu_for_help_for_other_commands_or_with_jax_platforms(tmp_path):
    bindir = _fake_smi(tmp_path / "bin")
    assert _warnings(_pawn("pretrain", "--help", path_prefix=bindir).stderr) == []
    assert _warnings(_pawn("eval", "--bogus", path_prefix=bindir).stderr) == []
    assert _warnings(_pawn("sweep", "--bogus", path_prefix=bindir, JAX_PLATFORMS="cpu").stderr) == []
    assert _warnings(_pawn("sweep", "--bogus").stderr) == []  # this machine: no nvidia-smi
    failing = _fake_smi(tmp_path / "bin2", rc=6)  # nvidia-smi present, no driver: "No devices were found"
    assert _warnings(_pawn("sweep", "--bogus", path_prefix=failing).stderr) == []


def test_tpu_chips_count_googles_pci_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    sysfs, dev = tmp_path / "pci", tmp_path / "dev"
    for name, vendor in (("0000:00:04.0", "0x1ae0"), ("0000:00:05.0", "0x1ae0\n"), ("0000:00:06.0", "0x10de")):
        (sysfs / name).mkdir(parents=True)
        (sysfs / name / "vendor").write_text(vendor)
    dev.mkdir()
    assert _accel.tpu_chips(str(sysfs), str(dev)) == 2
    empty = tmp_path / "none"
    empty.mkdir()
    assert _accel.tpu_chips(str(empty), str(dev)) == 0
    (dev / "accel0").touch()
    assert _accel.tpu_chips(str(empty), str(dev)) == 1
    line = _accel.unused_accelerator_warning(gpus=[], tpus=4)
    assert line is not None and "4 TPU chip(s)" in line and "pip install '.[tpu]'" in line
    assert _accel.unused_accelerator_warning(gpus=[], tpus=0) is None


def test_doctor_prints_jax_backend_and_devices(tmp_path):
    p = _pawn("doctor")
    assert p.returncode == 0, p.stderr
    rows = dict(ln.split(None, 1) if " " in ln else (ln, "") for ln in p.stdout.splitlines())
    import jax

    assert rows["backend"].strip() == "cpu"
    assert rows["devices"].strip().startswith("1 × cpu")
    assert f"jax {jax.__version__}" in p.stdout
    assert "no NVIDIA GPU" in p.stdout
    p = _pawn("doctor", path_prefix=_fake_smi(tmp_path / "bin"))
    assert "NVIDIA H200" in p.stdout and "pip install '.[cuda12]'" in p.stdout


def test_version_names_the_jax_version():
    import jax

    p = _pawn("--version")
    assert p.returncode == 0 and f"jax {jax.__version__}" in p.stdout


def test_doctor_json_holds_the_rows(tmp_path):
    p = _pawn("doctor", "--json", str(tmp_path / "d.json"))
    assert p.returncode == 0, p.stderr
    import json

    data = json.loads((tmp_path / "d.json").read_text())
    assert data["backend"] == "cpu" and data["devices"].startswith("1 × cpu")
