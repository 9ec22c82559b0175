"""PretrainConfig (spec training-and-adapters.md §3): precedence, unknown fields, cross-field rules."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pawn.cli import app
from pawn.settings import ConfigFileError, PretrainConfig, format_validation_error


def test_precedence_cli_over_env_over_file_over_defaults(tmp_path, monkeypatch):
    f = tmp_path / "run.toml"
    f.write_text('total_steps = 400\nbatch_size = 32\nlr = 0.001\nval_every = 100\ncheckpoint_every = 100\n')
    monkeypatch.setenv("PAWN_BATCH_SIZE", "64")
    monkeypatch.setenv("PAWN_LR", "0.002")
    cfg = PretrainConfig.load(f, lr=0.003)
    assert cfg.total_steps == 400  # file
    assert cfg.batch_size == 64  # env beats file
    assert cfg.lr == 0.003  # CLI beats env
    assert cfg.seq_len == 512 and cfg.weight_decay == 0.01  # defaults


def test_json_config_file_and_unknown_fields(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps({"total_steps": 100, "val_every": 50, "checkpoint_every": 50, "lerning_rate": 1}))
    with pytest.raises(ValidationError) as e:
        PretrainConfig.load(f)
    assert "lerning_rate: unknown field" in format_validation_error(e.value)


def test_unreadable_config_file_names_the_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("total_steps = = 3")
    with pytest.raises(ConfigFileError, match="bad.toml"):
        PretrainConfig.load(f)


def test_total_steps_is_required():
    with pytest.raises(ValidationError) as e:
        PretrainConfig.load()
    assert "total_steps: required" in format_validation_error(e.value)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(supernet="tiny", variant="toy"), "either supernet or variant"),
        (dict(lr_schedule="wsd", warmup_steps=950, decay_frac=0.1), "warmup_steps (950) + decay steps"),
        (dict(lr_schedule="infinite", warmup_frac=0.75), "cooldown"),
        (dict(seq_len=1024), "seq_len"),
        (dict(steps_per_chunk=7), "multiple of steps_per_chunk"),
        (dict(warmup_frac=1.5), "warmup_frac"),
        (dict(batch_size=0), "batch_size"),
        (dict(lr_schedule="one_cycle", warmup_steps=0), "one_cycle"),
    ],
)
def test_cross_field_rules_fail_at_parse_time(kwargs, needle):
    base = dict(total_steps=1000, val_every=100, checkpoint_every=100)
    with pytest.raises(ValidationError) as e:
        PretrainConfig.load(**{**base, **kwargs})
    assert needle in format_validation_error(e.value)


def test_resolved_defaults_follow_the_published_run():
    cfg = PretrainConfig.load(total_steps=200_000)
    assert cfg.resolved_warmup_steps == 10_000
    assert (cfg.lr, cfg.batch_size, cfg.seq_len, cfg.max_grad_norm) == (3e-4, 256, 512, 1.0)
    assert cfg.chunk_steps == 50 and cfg.model_configs()[0].d_model == 640
    assert cfg.schedule().value(200_000) == pytest.approx(3e-5)


def test_cli_reports_validation_errors_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["pretrain", "--supernet", "tiny", "--total-steps", "100", "--lr-schedule", "wsd", "--warmup-steps", "95", "--val-every", "100", "--checkpoint-every", "100"])
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "--warmup-steps (95)" in r.output
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ the training commands' shared sink and Hub fields
_SHARED = ("tensorboard", "wandb", "wandb_project", "wandb_mode", "push_to_hub", "hub_branch", "hub_private", "hub_exit_wait_s",
           "push_to_bucket")
_PUSH = ("to this Hugging Face model repo (owner/name; created if missing) as one commit each, in the background; outcomes "
         "are hub records in metrics.jsonl. Refused at start with HF_HUB_OFFLINE=1.")
_COMMON_HELP = {
    "wandb_project": "W&B project; default $WANDB_PROJECT, else pawn.",
    "hub_branch": "Branch for --push-to-hub (created if missing); default run/<run directory name>.",
    "hub_private": "Create the --push-to-hub repo and the --push-to-bucket bucket private (existing ones keep their visibility).",
    "hub_exit_wait_s": "At exit, wait at most this many seconds for pending pushes (for each of --push-to-hub and --push-to-bucket); "
                       "the rest are reported as not pushed.",
    "push_to_bucket": "Sync every checkpoint, metrics.jsonl and config.json to this Hugging Face storage bucket (owner/name, created "
                      "if missing; owner/name/folder names the folder in it) under <run directory name>/ by default (refused at start "
                      "when that folder holds another run's or a sweep's files; a sweep gives each trial <sweep directory name>/<study>/"
                      "trial_NNNN/), in the background and once more at exit; outcomes are hub records "
                      "in metrics.jsonl. Needs hf_xet. Refused at start with HF_HUB_OFFLINE=1.",
}
_HELP = {  # each command's help texts as they were before the fields were shared
    "pretrain": {**_COMMON_HELP,
                 "tensorboard": "Also write TensorBoard event files under RUN/tensorboard/ (needs pawn[tensorboard], i.e. tensorboardX).",
                 "wandb": "Also log to Weights & Biases (needs pawn[wandb]); run name and group = the run directory name.",
                 "wandb_mode": "W&B mode: offline writes RUN/wandb/ without a network (upload later with wandb sync).",
                 "push_to_hub": "Push every checkpoint " + _PUSH},
    "adapt": {**_COMMON_HELP,
              "tensorboard": "Also write TensorBoard event files (pawn[tensorboard]).",
              "wandb": "Also log to Weights & Biases (pawn[wandb]).",
              "wandb_mode": "W&B mode.",
              "push_to_hub": "Push every checkpoint (adapter weights, model card) " + _PUSH},
}
_TAIL = {"tensorboard": " [default: False]", "wandb": " [default: False]", "wandb_mode": " One of: online, offline, disabled. [default: online]",
         "hub_private": " [default: False]", "hub_exit_wait_s": " At least 0. [default: 300.0]"}


def test_pretrain_and_adapt_share_one_definition_of_the_sink_and_hub_fields():
    from pawn.settings import RunOutputSettings
    from pawn.train.adapt_config import AdaptSettings

    assert tuple(RunOutputSettings.model_fields) == _SHARED
    for model in (PretrainConfig, AdaptSettings):
        assert issubclass(model, RunOutputSettings)
        assert not set(_SHARED) & set(vars(model).get("__annotations__", {}))  # not declared again
        assert {n: model.model_fields[n].default for n in _SHARED} == {
            "tensorboard": False, "wandb": False, "wandb_project": None, "wandb_mode": "online", "push_to_hub": None,
            "hub_branch": None, "hub_private": False, "hub_exit_wait_s": 300.0, "push_to_bucket": None}


@pytest.mark.parametrize("command", ["pretrain", "adapt"])
def test_the_shared_fields_keep_their_flags_env_help_and_place_in_each_command(command):
    import typer.main

    import click

    group = typer.main.get_command(app)
    params = [p for p in group.get_command(click.Context(group), command).params if p.name != "help"]
    tail = {p.name: p for p in params[-len(_SHARED):]}
    assert tuple(tail) == _SHARED  # still listed last, in the same order
    for name, p in tail.items():
        flag = "--" + name.replace("_", "-")
        assert p.opts == [flag] and p.secondary_opts == (["--no-" + flag[2:]] if name in ("tensorboard", "wandb", "hub_private") else [])
        want = f"{_HELP[command][name]}{_TAIL.get(name, '')} Env: PAWN_{name.upper()}."
        assert p.help.replace("\\[", "[") == want, (name, p.help)
    # the help texts of the command's other flags are its own (a sample)
    assert any(p.name == ("supernet" if command == "pretrain" else "strategy") for p in params[:-len(_SHARED)])


@pytest.mark.parametrize("command", ["pretrain", "adapt"])
def test_the_shared_fields_come_from_env_and_config_file_and_are_checked(command, tmp_path, monkeypatch):
    from pawn.train.adapt_config import AdaptSettings

    model, base = (PretrainConfig, {"variant": "toy", "total_steps": 10}) if command == "pretrain" else (AdaptSettings, {})
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"hub_branch": "run/x", "hub_exit_wait_s": 5, "wandb_project": "p"}))
    monkeypatch.setenv("PAWN_WANDB_MODE", "offline")
    monkeypatch.setenv("PAWN_PUSH_TO_HUB", "owner/name")
    monkeypatch.setenv("PAWN_PUSH_TO_BUCKET", "owner/runs")
    s = model.load(cfg, **base, hub_private=True)
    assert (s.wandb_mode, s.push_to_hub, s.hub_branch, s.hub_exit_wait_s, s.wandb_project, s.hub_private, s.push_to_bucket) == (
        "offline", "owner/name", "run/x", 5.0, "p", True, "owner/runs")
    monkeypatch.delenv("PAWN_PUSH_TO_HUB")
    monkeypatch.delenv("PAWN_PUSH_TO_BUCKET")
    with pytest.raises(ValidationError, match=r"--push-to-bucket 'bad': give the repository as owner/name"):
        model.load(**base, push_to_bucket="bad")
    with pytest.raises(ValidationError, match=r"--push-to-hub 'bad': give the repository as owner/name") as e:
        model.load(**base, push_to_hub="bad")
    assert format_validation_error(e.value) == "--push-to-hub 'bad': give the repository as owner/name"  # the CLI's one line
    with pytest.raises(ValidationError, match="hub_exit_wait_s"):
        model.load(**base, hub_exit_wait_s=-1)


def test_a_field_tagged_path_is_read_relative_to_its_config_file_with_no_list_edited(tmp_path, monkeypatch):
    # The fields resolved relative to a --config file were a name list beside the settings
    # (backbone, data, corpus_dir, cache_dir, init_from); they are now the fields tagged PATH.
    from typing import Optional

    from pydantic import Field

    from pawn.settings import PATH, facts

    class WithBook(PretrainConfig):
        opening_book: Optional[str] = Field(None, json_schema_extra=facts(PATH))
        book_name: Optional[str] = None  # not tagged: a value, whatever it looks like

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "book.bin").write_bytes(b"")
    (tmp_path / "cfg" / "corpus").mkdir()
    f = tmp_path / "cfg" / "run.json"
    f.write_text(json.dumps({"total_steps": 10, "opening_book": "book.bin", "book_name": "book.bin", "corpus_dir": "corpus"}))
    monkeypatch.chdir(tmp_path)
    cfg = WithBook.load(f)
    assert cfg.opening_book == "cfg/book.bin" and cfg.book_name == "book.bin"
    assert str(cfg.corpus_dir) == "cfg/corpus"  # the tagged field of PretrainConfig, as before
    # a relative value that does not exist beside the file is kept as given (a path from here, a Hub id)
    f.write_text(json.dumps({"total_steps": 10, "opening_book": "owner/books"}))
    assert WithBook.load(f).opening_book == "owner/books"
