"""Time `pawn convert` on a random v1 checkpoint of a published size (default: base).

Usage: python benchmarks/convert.py [--size small|base|large]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from v1_checkpoints import v1_model_config, write_v1_checkpoint  # noqa: E402

from pawn.convert import convert  # noqa: E402

SIZES = {"small": (256, 8, 4, 1024), "base": (512, 8, 8, 2048), "large": (640, 10, 8, 2560)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="base")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = write_v1_checkpoint(Path(tmp) / "v1", v1_model_config(*SIZES[args.size]))
        res = convert(str(src), Path(tmp) / "v2")
        print(f"{args.size}: converted in {res.seconds:.2f} s (write, reload with hash check, parity); "
              f"max |Δlogit| = {res.max_abs_dlogit:.2e}")


if __name__ == "__main__":
    main()
