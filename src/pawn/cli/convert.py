"""``pawn convert``: parse → :func:`pawn.convert.convert_many` (or ``--slice``) → one table row per
source → optional ``--push-to-hub``; ``--merge`` folds adapters in, ``--peft`` / ``--from-peft``
write and read LoRA adapters in the PEFT layout (:mod:`pawn.adapters.peft`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pawn.cli._errors import fail
from pawn.cli._output import Column, Output, TableReport


def convert_cmd(
    sources: Annotated[list[str], typer.Argument(help="One or more sources: Hugging Face Hub ids (owner/name, optionally @revision: a branch, tag or commit, and /folder: one checkpoint in a repo folder) or local directories with a v1 model.safetensors + config.json (with --slice: v2 supernet checkpoints).")],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Destination directory (with several sources: a parent directory, one sub-folder per source). It must be missing, empty, or this command's own earlier result for the same source; a file, a symbolic link, a run directory or any other directory or checkpoint is refused and left unchanged. Default: the conversion cache ($PAWN_CONVERTED_DIR, else $HF_HOME/assets/pawn/converted), keyed by the source and, for a Hub id, its resolved commit."),
    ] = None,
    slice_variant: Annotated[Optional[str], typer.Option("--slice", help="Instead of converting, write this nested variant (small, base, large) of a supernet checkpoint as a standalone checkpoint; `pawn eval` gives it the same numbers as --variant on the supernet.")] = None,
    merge: Annotated[bool, typer.Option("--merge", help="SOURCES are adapter checkpoints (e.g. runs/adapt-lora/best): fold each (lora, sparse, unfreeze, specialized_clm) into its backbone and write a standalone v2 checkpoint (default: <source>-merged; with one source, --output). An existing output is replaced only if it is an earlier merge of the same adapter.")] = False,
    peft: Annotated[Optional[Path], typer.Option("--peft", metavar="OUT", help="The SOURCE is a lora adapter checkpoint or its run directory (the run's best checkpoint): write it to OUT as a Hugging Face PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) for pawn.torch.load(backbone, adapter=OUT) and peft.PeftModel. Other strategies are refused. OUT must be missing, empty, or an earlier export of the same adapter.")] = None,
    from_peft: Annotated[bool, typer.Option("--from-peft", help="SOURCES are PEFT LoRA folders (from --peft, or trained with PEFT on pawn.torch.PAWNTorch): write each as a PAWN adapter checkpoint (default: <source>-pawn; with one source, --output), for pawn eval, play, --merge. Weights are copied bit for bit.")] = False,
    backbone: Annotated[Optional[Path], typer.Option("--backbone", help="With --from-peft: the backbone checkpoint of a PEFT folder not exported by PAWN (default: its base_model_name_or_path); for a PAWN export, checked against the recorded SHA-256.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rewrite even if the cache already holds this source (a Hub id is keyed by its resolved commit, so a re-published repo is converted again without --force).")] = False,
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", help="Then publish the converted checkpoint (with its README.md model card) to this Hub model repo (owner/name; created if missing) as one commit; one source only. For a finished run's files, use `hf upload`.")] = None,
    hub_branch: Annotated[str, typer.Option("--hub-branch", help="Branch for --push-to-hub (created if missing).")] = "main",
    hub_private: Annotated[bool, typer.Option("--hub-private", help="Create the --push-to-hub repo private.")] = False,
) -> None:
    """Convert published v1 PAWN checkpoints to the v2 format and check their logits.

    Each source is reported in a table row (result, output, parity) and a failure does not stop
    the others; the exit code is 1 if any failed. The last lines are the output directories. The
    parity check compares the converted fp32 model with an independent float64 NumPy v1 forward
    on a fixed batch: max |Δlogit| ≤ 1e-3 and mean ≤ 1e-4 over real positions. HF_HUB_OFFLINE=1
    is honoured (cached downloads only). ``--peft OUT`` writes a lora adapter as a Hugging Face
    PEFT folder and ``--from-peft`` reads one back (bit-identical weights).
    """
    from pawn.convert import convert_many
    from pawn.hub.push import check_can_push, push_checkpoint

    modes = [f for f, on in (("--merge", merge), ("--slice", slice_variant is not None), ("--peft", peft is not None),
                             ("--from-peft", from_peft)) if on]
    if len(modes) > 1:
        raise fail(f"{' and '.join(modes)} cannot be combined; choose one", 2)
    if modes and modes[0] in ("--peft", "--from-peft") and push_to_hub is not None:
        raise fail(f"--push-to-hub does not apply to {modes[0]}; upload the folder with `hf upload`", 2)
    if backbone is not None and not from_peft:
        raise fail("--backbone applies only with --from-peft", 2)
    if peft is not None:
        return _peft(sources, peft, output)
    if from_peft:
        return _from_peft(sources, output, backbone)
    if merge:
        return _merge(sources, output)

    if slice_variant is not None:  # a name no supernet has: bad usage, refused before loading anything
        from pawn.config import SUPERNETS

        names = sorted({v for _, variants in SUPERNETS.values() for v in variants})
        if slice_variant not in names:
            raise fail(f"--slice {slice_variant!r}: not a supernet variant; choose one of {', '.join(names)}", 2)
    if push_to_hub is not None:  # offline mode or a bad repo id: refused before any work
        if len(sources) != 1:
            raise fail("--push-to-hub takes one source", 2)
        check_can_push(push_to_hub)
    reports = convert_many(sources, output, force=force, slice_variant=slice_variant,
                           on_done=lambda r: None if r.ok else typer.secho(f"error: {r.error}", err=True, fg=typer.colors.RED))
    if any(r.ok for r in reports):  # when every source failed, their error lines above are the whole report
        table = TableReport("pawn convert" + (f" --slice {slice_variant}" if slice_variant else ""),
                            [Column(c, justify="left") for c in ("source", "result", "output", "parity max / mean |Δlogit|")])
        for r in reports:
            table.add(*(r.row() if r.ok else (r.source, "failed (error above)", "", "")))
        Output().report(table)
    for r in reports:
        if r.ok:
            typer.echo(str(r.result.path))
    if not all(r.ok for r in reports):
        raise typer.Exit(1)
    if push_to_hub is not None:
        o = push_checkpoint(reports[0].result.path, push_to_hub, branch=hub_branch, private=hub_private, log=lambda m: typer.echo(m, err=True))
        typer.echo(f"pushed to {push_to_hub}@{hub_branch}: commit {o.commit}")


def _merge(sources: list[str], output: Optional[Path]) -> None:
    """``--merge``: each adapter checkpoint folded into its backbone (one line per source)."""
    from pawn.adapters.io import merge_adapter_checkpoint
    from pawn.evaluate.loading import resolve_backbone
    from pawn.settings import RECIPE, PretrainConfig, fields_with

    if output is not None and len(sources) != 1:
        raise fail("--merge with --output takes one source (several are written next to their sources)", 2)
    for src in sources:
        typer.echo(str(merge_adapter_checkpoint(src, output, resolve=resolve_backbone, recipe_fields=fields_with(PretrainConfig, RECIPE))))


def _peft(sources: list[str], out: Path, output: Optional[Path]) -> None:
    """``--peft OUT``: one lora adapter checkpoint (or run directory) written as a PEFT folder."""
    from pawn.adapters.peft import export_peft
    from pawn.cli._paths import resolve_checkpoint_arg

    if len(sources) != 1:
        raise fail("--peft takes one source (one adapter checkpoint or run directory)", 2)
    if output is not None:
        raise fail("--peft names the output folder itself; drop --output", 2)
    src = resolve_checkpoint_arg(sources[0], lambda m: typer.echo(m, err=True), flag="SOURCE")
    typer.echo(str(export_peft(src, out)))


def _from_peft(sources: list[str], output: Optional[Path], backbone: Optional[Path]) -> None:
    """``--from-peft``: each PEFT LoRA folder written as a PAWN adapter checkpoint (one line per source)."""
    from pawn.adapters.peft import import_peft
    from pawn.cli._paths import check_input
    from pawn.evaluate.loading import resolve_backbone

    if output is not None and len(sources) != 1:
        raise fail("--from-peft with --output takes one source (several are written next to their sources)", 2)
    for src in sources:
        check_input(src, "SOURCE", hub=False, what="PEFT adapter folder")
        typer.echo(str(import_peft(src, output, backbone_dir=backbone, resolve=resolve_backbone)))
