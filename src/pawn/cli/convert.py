"""``pawn convert``: parse → :func:`pawn.convert.convert` → render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def convert_cmd(
    source: Annotated[str, typer.Argument(help="Hugging Face repo id (owner/name) or a local directory with a v1 model.safetensors + config.json.")],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Destination directory. Default: the conversion cache ($PAWN_CONVERTED_DIR, else $HF_HOME/pawn-jax-converted), keyed by the source id."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Reconvert even if this source id is already in the cache (the cache key is the id, not the weights' content).")] = False,
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", help="Then publish the converted checkpoint (with its README.md model card) to this Hub model repo (owner/name; created if missing) as one commit. For a finished run's files, use `hf upload`.")] = None,
    hub_branch: Annotated[str, typer.Option("--hub-branch", help="Branch for --push-to-hub (created if missing).")] = "main",
    hub_private: Annotated[bool, typer.Option("--hub-private", help="Create the --push-to-hub repo private.")] = False,
) -> None:
    """Convert a published v1 PAWN checkpoint to the v2 format and check its logits.

    After writing, the converted model and an independent NumPy v1 forward run on a fixed batch;
    the command fails if max |Δlogit| over real positions exceeds 1e-4. HF_HUB_OFFLINE=1 is honoured.
    """
    from pawn.convert import convert
    from pawn.hub.push import check_can_push, push_checkpoint

    if push_to_hub is not None:  # offline mode or a bad repo id: refused before any work
        check_can_push(push_to_hub)
    res = convert(source, output, force=force)
    c = res.config
    shape = f"d_model={c.d_model} n_layers={c.n_layers} n_heads={c.n_heads} (head_dim {c.head_dim}) d_ff={c.d_ff}"
    if res.cached:
        typer.echo(f"cached conversion of {source} ({shape}); use --force to reconvert")
    else:
        typer.echo(f"converted {source} ({shape}) in {res.seconds:.1f} s; parity max |Δlogit| = {res.max_abs_dlogit:.2e}")
    typer.echo(str(res.path))
    if push_to_hub is not None:
        o = push_checkpoint(res.path, push_to_hub, branch=hub_branch, private=hub_private, log=lambda m: typer.echo(m, err=True))
        typer.echo(f"pushed to {push_to_hub}@{hub_branch}: commit {o.commit}")
