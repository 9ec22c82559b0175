"""Wall time of `pawn probe` on a TINY supernet checkpoint (all three nested variants).

Usage: python benchmarks/probe.py [--checkpoint DIR] [--games 64] [--val-games N] [--epochs 20]
       [--max-ply N] [--streaming]

Without --checkpoint a random-init TINY supernet checkpoint is written to a temporary directory
with the run config of `pawn pretrain --supernet tiny` (seq_len 128, pure moves), so the probe
defaults are those a user gets on such a run (max_ply = min(128, 256) = 128). Speed does not
depend on the weights. Times the whole `pawn probe` command in-process (corpus generation,
compile, hidden-state pass, training, validation) and prints each variant's wall time (the
``wall_s`` of its --json record). --streaming sets --feature-cache-gb 0 (the forward pass repeated every epoch,
as before the feature cache) for a same-run comparison. The load average is printed: the
timings are only comparable within one run on a shared machine. Each variant's line splits its
time into corpus + hidden-state pass, seconds per epoch and the final validation pass
(``settings.timing_s`` of the record); the peak resident memory of the process is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import jax


def _tiny_checkpoint(directory: Path) -> Path:
    from pawn.checkpoint import save_checkpoint
    from pawn.config import TINY_SUPERNET
    from pawn.model import PAWNModel

    run_config = {"supernet": "tiny", "variant": None, "seq_len": 128, "prepend_outcome": False}
    return save_checkpoint(directory / "tiny", PAWNModel(TINY_SUPERNET, jax.random.PRNGKey(0)).params(), TINY_SUPERNET,
                           run_config=run_config)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, default=None)
    p.add_argument("--games", type=int, default=64)
    p.add_argument("--val-games", type=int, default=None)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--max-ply", type=int, default=None)
    p.add_argument("--streaming", action="store_true", help="--feature-cache-gb 0 (recompute hidden states every epoch)")
    args = p.parse_args()
    from typer.testing import CliRunner

    from pawn.cli import app

    with tempfile.TemporaryDirectory() as tmp:
        ck = args.checkpoint or _tiny_checkpoint(Path(tmp))
        cmd = ["probe", str(ck), "--games", str(args.games), "--epochs", str(args.epochs), "--json", str(Path(tmp) / "p.json")]
        if args.val_games is not None:
            cmd += ["--val-games", str(args.val_games)]
        if args.max_ply is not None:
            cmd += ["--max-ply", str(args.max_ply)]
        if args.streaming:
            cmd += ["--feature-cache-gb", "0"]
        load0 = os.getloadavg()[0]
        t = time.perf_counter()
        res = CliRunner().invoke(app, cmd)
        wall = time.perf_counter() - t
        if res.exit_code != 0:
            raise SystemExit(f"pawn probe failed ({res.exit_code}): {res.output[-2000:]}")
        import json

        data = json.loads((Path(tmp) / "p.json").read_text())
    s = data["models"][0]["settings"]
    shown = [a for a in cmd[2:] if a not in ("--json", str(Path(tmp) / "p.json"))]
    print(f"pawn probe {' '.join(shown)}: {wall:.1f} s for {len(data['models'])} variants "
          f"({s['n_games']}/{s['n_val_games']} games, max_ply {s['max_ply']}, {s['n_epochs']} epochs, "
          f"cached {s['features_cached']}); device {jax.devices()[0].device_kind}, "
          f"load average {load0:.1f} → {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    for m in data["models"]:
        t = m["settings"]["timing_s"]
        per_epoch = t["epochs"] / max(s["n_epochs"], 1)
        print(f"  {m['name']}: {m['wall_s']:.1f} s ({m['probes']['piece_type']['embed']['n_train']} train / "
              f"{m['probes']['piece_type']['embed']['n_val']} val positions): corpus + hidden states {t['features']:.1f} s, "
              f"{per_epoch:.1f} s/epoch (training + validation), final validation {t['final_val']:.1f} s")


if __name__ == "__main__":
    main()
