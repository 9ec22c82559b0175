"""``pawn adapt``: parse :class:`pawn.train.adapt_config.AdaptSettings` → :func:`pawn.train.adapt.run_adapt` → render."""

from __future__ import annotations

import inspect
from typing import Optional

import typer

from pawn.cli._options import flag, settings_command
from pawn.cli._output import Column, Output, TableReport, print_config, report_end, run_training
from pawn.train.adapt_config import AdaptSettings
from pawn.progress import counted

DOC = (
    "Fine-tune a frozen backbone into a player model on Lichess games with an adapter (--strategy; "
    "--list-strategies shows them).\n\n"
    "BACKBONE is a checkpoint directory (e.g. runs/tiny/variants/large) or a Hub id; --data a PGN or parquet file or "
    "folder, or a Hub dataset id. Loss: cross-entropy over legal moves only (--no-legal-mask for the full vocabulary, "
    "with optional --illegal-penalty). An adapter trained under the legal mask (the default) only learned to rank legal "
    "moves: decode it under the mask too (pawn eval's legal-masked top-1, pawn generate --mask-illegal); unmasked, its "
    "legal-move rate falls far (4.5 % legal moves for the README's bottleneck adapter). Validates at step 0 and after every epoch; writes metrics.jsonl, "
    "config.json, schedule_health.json, split.json (the source fingerprint and which games were train/validation/test, "
    "--test-games N holds out a test split too), checkpoints/step_N, checkpoints/best (lowest val loss, linked as OUT/best: "
    "pawn eval OUT/best --split val|test evaluates the held-out games) under --out. --resume DIR|auto continues exactly, mid-epoch included; SIGTERM/Ctrl-C "
    "checkpoints and stops. Every option can also come from a PAWN_<NAME> environment variable or a --config file "
    "(command line > environment > config file > defaults); an exported PAWN_<NAME> applies to every later command "
    "with that field, so set it for one command (PAWN_SEED=3 pawn adapt …) or use the flag."
)



def strategy_report(cfg: Optional[AdaptSettings] = None) -> TableReport:
    """The strategy table (``--list-strategies``): what trains, the parameter formula, and the
    adapter settings ``pawn adapt`` would use for each strategy — its defaults (the strategy
    table's, the same as :func:`pawn.adapters.build_adapted`'s) overridden by the flags,
    environment and config file of ``cfg``."""
    from pawn.adapters import STRATEGIES

    cfg = cfg if cfg is not None else AdaptSettings.model_construct()
    rep = TableReport("adapter strategies", [Column("strategy", justify="left"), Column("trains", justify="left"),
                                             Column("parameters", justify="left"), Column("mergeable", justify="left"),
                                             Column("lr", justify="right"), Column("settings pawn adapt uses", justify="left")])
    for row in STRATEGIES.values():
        used = row.parse(cfg.strategy_settings(row.name)).model_dump(mode="json")
        lr = cfg.lr if "lr" in cfg.user_set_fields and cfg.lr is not None else row.lr  # --lr given: what this run would use
        rep.add(row.name, row.trains, row.formula, "yes" if row.mergeable else "no", f"{lr:g}",
                ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in used.items()))
    return rep


def adapt(cfg: AdaptSettings, backbone_arg: Optional[str] = None, overwrite: bool = False, list_strategies: bool = False,
          show_config: bool = False) -> None:
    if list_strategies:
        Output().report(strategy_report(cfg))
        return
    if backbone_arg is not None:  # the positional wins over PAWN_BACKBONE and the config file
        fields = cfg.model_dump(include=cfg.user_set_fields)
        cfg = AdaptSettings.load(**{**fields, "backbone": backbone_arg})
    if show_config:
        print_config(cfg)
        return
    from pawn.cli._paths import check_input, check_output_dir, init_from_checkpoint

    # checked before JAX is imported and the backbone loaded
    if cfg.resume is None:
        cfg.check_startable()
        check_input(cfg.backbone, "BACKBONE", what="checkpoint directory", note=cfg.config_path_note("backbone"))
    check_input(cfg.data, "--data", note=cfg.config_path_note("data"))
    check_output_dir(cfg.out)
    cfg = init_from_checkpoint(cfg, lambda line: typer.echo(line, err=True))
    from pawn.evaluate.loading import resolve_backbone
    from pawn.train.adapt import AdaptTask, step0_label
    from pawn.train import spine
    from pawn.report.hook import report_sinks  # the run's live report.html, with the report extra

    log = lambda msg: typer.echo(msg, err=True)  # noqa: E731
    task = AdaptTask(cfg, resolve_backbone=resolve_backbone, log=log)
    res = run_training(lambda: spine.run(task, log=log, overwrite=bool(overwrite), sinks=report_sinks()), lambda: task.run_dir)
    if report_end(res, "val loss", f" ({counted(res.total_steps // res.steps_per_epoch, 'epoch')})"):
        return
    from pawn.metrics import SCOPE_ALL

    # under the hard mask the figures count the move decisions; without it every supervised position
    scope = f"legal-masked, {SCOPE_ALL}" if res.legal_mask else "all positions, end of game included"
    rep = TableReport(f"{res.strategy}: {res.trainable_params:,} trainable parameters",
                      [Column("when", justify="left"), Column("val loss", ".4f"), Column(f"val top-1 ({scope})", "pct"),
                       Column("val top-5", "pct")])
    if res.baseline_val:
        b = res.baseline_val
        rep.add(f"step 0 ({step0_label(res.strategy, cfg.init_from is not None and cfg.resume is None)})",
                b["loss"], b["top1"], b["top5"])
    if res.last_val:
        v = res.last_val
        rep.add(f"step {v['step']}", v["loss"], v["top1"], v["top5"])
    Output().report(rep)
    c = res.compute
    if c:  # what the run really spent: equal "--steps" are not equal compute across strategies
        warm = (f" ({c['main_steps']:,} main + {c['warmup_steps']:,} RoSA warm-up) and {c['mask_scoring_batches']:,} "
                f"mask-scoring batches: {c['gradient_batches']:,} gradient batches" if c.get("gradient_batches", 0) != c["optimizer_steps"]
                else "")
        typer.echo(f"spent {c['optimizer_steps']:,} optimizer steps{warm}; {c['trainable_params']:,} trainable parameters, "
                   + ("each reached by the loss (its gradient can be nonzero)" if c["movable_params"] == c["trainable_params"] else f"{c['movable_params']:,} reached by the loss (the gradient of the other {c['trainable_params'] - c['movable_params']:,}, such as the PAD and outcome embeddings, is always zero: they never move)"))
    sp = res.split
    if sp is not None:
        test = f", {sp.n('test'):,} test" if sp.n("test") else ""
        typer.echo(f"split: {sp.n('train'):,} training, {sp.n('val'):,} validation{test} games of {sp.repo_or_path}, "
                   f"recorded in {sp.path}; evaluate held-out games with pawn eval {res.run_dir / 'best'} --split "
                   f"{'test' if test else 'val'} (not --pgn on the training source)")
    typer.echo(f"checkpoint: {res.checkpoint}")
    if res.best_checkpoint is not None:
        typer.echo(f"best checkpoint (lowest val loss, step {res.best_step}): {res.run_dir / 'best'}")


def _adapt(cfg: AdaptSettings, backbone_arg: Optional[str] = None, overwrite: bool = False, list_strategies: bool = False,
           show_config: bool = False) -> None:
    adapt(cfg, backbone_arg, overwrite, list_strategies, show_config)


_backbone = inspect.Parameter("backbone_arg", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                              default=typer.Argument(None, metavar="BACKBONE", show_default=False,
                                                     help="Backbone checkpoint directory or Hub id (not needed with --resume or --list-strategies)."))


command = settings_command(AdaptSettings, _adapt, doc=DOC, before=[_backbone], exclude=["backbone"], after=[
    flag("overwrite", bool, False, "--overwrite",
         help="If --out holds another run, move it aside to OUT.old-<time> (never deleted) and start a new run there."),
    flag("list_strategies", bool, False, "--list-strategies", help="Print the strategy table (what trains, parameter formula, defaults) and exit."),
    flag("show_config", bool, False, "--print-config",
         help="Print the full resolved settings as JSON and exit (seq_len: the value given, else the field default; the "
              "run itself uses the backbone's trained context when --seq-len is not given); pass it back with --config FILE."),
])
