"""Is there an accelerator JAX is not using? The install lines for JAX on a GPU or a TPU, and the
one warning line that the training commands print when the machine has an NVIDIA GPU or a TPU but
the installed JAX can only run on the CPU.

The check reads nothing from JAX's runtime (so it cannot initialise a backend before
``jax.distributed.initialize``, which must come first): a GPU is present when ``nvidia-smi -L``
lists one, a TPU when the PCI bus has a Google device (vendor ``0x1ae0``, the rule JAX's own TPU
detection uses in ``jax._src.hardware_utils``) or ``/dev/accel*`` exists; JAX can use it when its
plugin is installed (``jax-cuda12-plugin`` / ``jax-cuda13-plugin`` for CUDA, ``libtpu`` for TPUs;
JAX's installation guide: https://docs.jax.dev/en/latest/installation.html).
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

GPU_INSTALL = "pip install '.[cuda12]'"
"""PAWN's extra that pulls JAX's CUDA 12 wheels (``jax[cuda12]``: CUDA and cuDNN from pip, an NVIDIA
driver ≥ 525); ``.[cuda13]`` for CUDA 13 (driver ≥ 580)."""

TPU_INSTALL = "pip install '.[tpu]'"
"""PAWN's extra that pulls ``jax[tpu]`` (libtpu) on a Cloud TPU VM."""

CHECK = "python -c 'import jax; print(jax.devices())'"
"""One line that shows the devices JAX sees."""

COMMANDS = ("pretrain", "adapt", "sweep", "bench")
"""The commands that print the warning (those that train or time training)."""

GOOGLE_PCI_VENDOR = "0x1ae0"


def nvidia_gpus(timeout_s: float = 10.0) -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists (one ``"GPU 0: NVIDIA H200 (UUID: …)"`` line each); empty
    when the command is missing, fails or takes longer than ``timeout_s`` seconds."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        p = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return []
    if p.returncode != 0:
        return []
    return [ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("GPU")]


def tpu_chips(sysfs: str = "/sys/bus/pci/devices", dev: str = "/dev") -> int:
    """The TPU chips on this machine: PCI devices of Google's vendor id under ``sysfs``, else the
    ``accel*`` nodes under ``dev`` (0 when neither exists)."""
    n = 0
    for vendor in glob.glob(os.path.join(sysfs, "*", "vendor")):
        try:
            if Path(vendor).read_text().strip().lower() == GOOGLE_PCI_VENDOR:
                n += 1
        except OSError:
            continue
    return n or len(glob.glob(os.path.join(dev, "accel[0-9]*")))


def _installed(*names: str) -> list[str]:
    out = []
    for name in names:
        try:
            out.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def cuda_plugins() -> list[str]:
    """JAX's CUDA plugins installed in this environment, ``"name version"`` each."""
    return _installed("jax-cuda12-plugin", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda13-pjrt")


def tpu_runtime() -> list[str]:
    """libtpu as installed (``"libtpu version"``), or empty."""
    return _installed("libtpu", "libtpu-nightly")


def unused_accelerator_warning(*, gpus: Optional[list[str]] = None, tpus: Optional[int] = None) -> Optional[str]:
    """The one warning line when this machine has an NVIDIA GPU or a TPU that the installed JAX
    cannot use (no CUDA plugin / no libtpu), naming the install line; None otherwise, and None
    when ``JAX_PLATFORMS`` is set (the user chose the platform).

    ``gpus`` and ``tpus`` default to :func:`nvidia_gpus` and :func:`tpu_chips`."""
    if os.environ.get("JAX_PLATFORMS", "").strip():
        return None
    gpus = nvidia_gpus() if gpus is None else gpus
    if gpus and not cuda_plugins():
        return (f"warning: this machine has {len(gpus)} NVIDIA GPU(s) (nvidia-smi) but the installed JAX has no CUDA "
                f"plugin, so everything runs on the CPU; install JAX's CUDA build with {GPU_INSTALL} (or "
                f"pip install -U 'jax[cuda12]'), then check with {CHECK}")
    tpus = tpu_chips() if tpus is None else tpus
    if tpus and not tpu_runtime():
        return (f"warning: this machine has {tpus} TPU chip(s) but libtpu is not installed, so JAX runs on the CPU; "
                f"install it with {TPU_INSTALL} (or pip install -U 'jax[tpu]'), then check with {CHECK}")
    return None


def jax_versions() -> str:
    """``"jax X, jaxlib Y"`` from the installed packages' metadata (JAX is not imported)."""
    got = _installed("jax", "jaxlib")
    return ", ".join(got) if got else "jax not installed"


def doctor_report() -> list[tuple[str, str]]:
    """What ``pawn doctor`` prints: ``(what, value)`` rows for the package, the engine, Python,
    JAX (version, plugins, backend, each device kind with its count and memory) and the
    accelerator check. Imports JAX and initialises its backend."""
    import platform

    from pawn import __version__, _engine

    rows = [("pawn", f"{__version__} (pawn-engine {_engine.__version__})"),
            ("python", f"{platform.python_version()} ({platform.machine()})"),
            ("jax", jax_versions()),
            ("jax plugins", ", ".join(cuda_plugins() + tpu_runtime()) or "none (CPU only)")]
    import jax

    rows.append(("backend", jax.default_backend()))
    kinds: dict[str, list] = {}
    for d in jax.devices():
        kinds.setdefault(d.device_kind, []).append(d)
    for kind, devs in kinds.items():
        mem = ""
        try:
            limit = (devs[0].memory_stats() or {}).get("bytes_limit")
            mem = f", {limit / 2 ** 30:.1f} GiB each" if limit else ""
        except Exception:  # noqa: BLE001 - CPUs and some plugins give no memory stats
            mem = ""
        rows.append(("devices", f"{len(devs)} × {kind} ({devs[0].platform}{mem})"))
    gpus, tpus = nvidia_gpus(), tpu_chips()
    rows.append(("nvidia-smi", f"{len(gpus)} GPU(s): {gpus[0]}" + (" …" if len(gpus) > 1 else "") if gpus else "no NVIDIA GPU"))
    rows.append(("tpu", f"{tpus} chip(s)" if tpus else "no TPU"))
    warn = unused_accelerator_warning(gpus=gpus, tpus=tpus)
    if warn is None and jax.default_backend() == "cpu" and (gpus or tpus) and not os.environ.get("JAX_PLATFORMS"):
        warn = ("warning: JAX's plugin is installed but JAX runs on the CPU (driver or library mismatch?): "
                f"see {CHECK} and JAX's installation guide")
    rows.append(("verdict", warn.removeprefix("warning: ") if warn else f"JAX runs on {jax.default_backend()}"))
    return rows
