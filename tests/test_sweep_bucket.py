"""Two sweeps and a run share one storage bucket (``push_to_bucket`` in a sweep's ``--base-config``, or a
run's ``--push-to-bucket``): each sweep claims ``<sweep directory name>/<study>/`` and each trial syncs to
its own ``trial_NNNN/`` there; a second sweep on a claimed folder, or a run on a sweep's folder, is refused
at start in one line; a continued sweep keeps its folder; ``owner/name/folder`` names the folder. Every
case drives the real CLI against the loopback fake Hub (tests/fake_hub.py) through huggingface_hub and hf_xet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pawn.cli import app
from test_hub_bucket import _read_back, hub  # noqa: F401  (hub: the fake Hub fixture, per test)

BUCKET = "me/pawn-sweeps"
BASE = ('variant = "toy"\nbatch_size = 4\nseq_len = 32\nval_games = 8\nval_every = 2\ncheckpoint_every = 2\n'
        'steps_per_chunk = 2\ntotal_steps = 2\nwarmup_steps = 0\nweight_decay = 0.0\nkeep_checkpoints = 1\n'
        f'push_to_bucket = "{BUCKET}"\n')
SPACE = 'lr = {type = "float", low = 1e-4, high = 1e-3, log = true}\n'


def _sweep(tmp_path: Path, out: Path, *extra: str, trials: int = 1) -> list[str]:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "space.toml").write_text(SPACE)
    return ["sweep", "--run-type", "pretrain", "--base-config", str(tmp_path / "base.toml"), "--space",
            str(tmp_path / "space.toml"), "--trials", str(trials), "--seed", "0", "--out", str(out), *extra]


def _pretrain(out: Path, bucket: str) -> list[str]:
    return ["pretrain", "--variant", "toy", "--total-steps", "2", "--steps-per-chunk", "2", "--checkpoint-every", "2",
            "--batch-size", "4", "--seq-len", "32", "--val-games", "0", "--out", str(out), "--push-to-bucket", bucket]


def _errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def _trial_files(trial: Path, folder: str) -> dict[str, bytes]:
    """A trial run's checkpoints and config.json as the bucket should hold them under ``folder``."""
    files = {f"{folder}/{p.relative_to(trial).as_posix()}": p.read_bytes() for p in (trial / "checkpoints").rglob("*")
             if p.is_file() and not p.relative_to(trial).parts[1].startswith(".")}
    return {**files, f"{folder}/config.json": (trial / "config.json").read_bytes()}


@pytest.mark.slow  # four trainings (~45 s on a shared CPU); the quick test below covers the claim and the refusals
def test_two_sweeps_and_a_run_share_one_bucket_and_a_taken_folder_is_refused_at_start(hub, tmp_path):
    a, a_twin, c = tmp_path / "a" / "sweep", tmp_path / "b" / "sweep", tmp_path / "c" / "sweep-c"
    r = CliRunner().invoke(app, _sweep(tmp_path, a))
    assert r.exit_code == 0, r.output
    assert f"hub: each trial syncs to hf://buckets/{BUCKET}/sweep/pretrain/trial_NNNN (claimed for this sweep)" in r.output
    # another sweep directory of the same name (another machine, another parent folder): the same folder in
    # the bucket, claimed by a's study; refused before any trial, naming a's sweep id
    a_id = json.loads(_read_back(hub, BUCKET, tmp_path / "back0")["sweep/pretrain/sweep.json"])["sweep_id"]
    r = CliRunner().invoke(app, _sweep(tmp_path, a_twin))
    assert r.exit_code == 1, r.output
    assert _errors(r.output) == [
        f"error: --push-to-bucket {BUCKET}: hf://buckets/{BUCKET}/sweep/pretrain holds the trials of another sweep "
        f"(study pretrain, sweep id {a_id}), and this sweep would mix its trials into them; name another folder "
        f"(--push-to-bucket {BUCKET}/FOLDER in --base-config), give the study another --study-name, or the sweep an "
        "--out folder of another name"], r.output
    assert not (a_twin / "pretrain").exists() and "Traceback" not in r.output
    # a sweep of another directory name: its own folder
    r = CliRunner().invoke(app, _sweep(tmp_path, c))
    assert r.exit_code == 0, r.output
    # a run whose default folder is the first sweep's: refused naming the sweep; into a folder of its own: synced
    run = tmp_path / "r" / "sweep"
    r = CliRunner().invoke(app, _pretrain(run, BUCKET))
    assert r.exit_code == 1, r.output
    assert (f"error: --push-to-bucket {BUCKET}: hf://buckets/{BUCKET}/sweep holds the trials of a sweep (study pretrain), "
            "and this run would mix its files into it") in r.output and not run.exists()
    r = CliRunner().invoke(app, _pretrain(run, f"{BUCKET}/runs/first"))
    assert r.exit_code == 0, r.output
    # the first sweep continued (the same study: its folder), one more trial
    r = CliRunner().invoke(app, _sweep(tmp_path, a, trials=2))
    assert r.exit_code == 0, r.output
    assert f"hf://buckets/{BUCKET}/sweep/pretrain/trial_NNNN (continuing this sweep)" in r.output

    back = _read_back(hub, BUCKET, tmp_path / "back")
    want = {**_trial_files(a / "pretrain" / "trial_0000", "sweep/pretrain/trial_0000"),
            **_trial_files(a / "pretrain" / "trial_0001", "sweep/pretrain/trial_0001"),
            **_trial_files(c / "pretrain" / "trial_0000", "sweep-c/pretrain/trial_0000"),
            **_trial_files(run, "runs/first")}
    assert {k: back[k] for k in want} == want
    assert {k.rsplit("/", 1)[0] for k in back if k.endswith("/metrics.jsonl")} == {
        "sweep/pretrain/trial_0000", "sweep/pretrain/trial_0001", "sweep-c/pretrain/trial_0000", "runs/first"}
    ids = {json.loads(back[f"{f}/sweep.json"])["sweep_id"] for f in ("sweep/pretrain", "sweep-c/pretrain")}
    assert len(ids) == 2 and a_id in ids
    for trial, folder in ((a / "pretrain" / "trial_0001", "sweep/pretrain/trial_0001"), (run, "runs/first")):
        sent = back[f"{folder}/metrics.jsonl"]
        assert (trial / "metrics.jsonl").read_bytes().startswith(sent) and b'"type": "end"' in sent
    # best_config.json names the bucket, not a trial's folder: a re-run syncs to a folder of its own
    assert json.loads((a / "best_config.json").read_text())["push_to_bucket"] == BUCKET


def test_a_folder_named_in_the_target_holds_the_sweep_and_bad_folders_are_refused(hub, tmp_path, monkeypatch):
    from pawn.errors import UsageError
    from pawn.hub.bucket import split_bucket_target

    assert split_bucket_target("me/b") == ("me/b", None)
    assert split_bucket_target("me/b/exp/one/") == ("me/b", "exp/one")
    for bad in ("me/b//x", "me/b/../x", "me/b/./x", "nobody"):
        with pytest.raises(UsageError, match="--push-to-bucket"):
            split_bucket_target(bad)
    (tmp_path / "named.toml").write_text(BASE.replace(f'"{BUCKET}"', f'"{BUCKET}/exp/1"'))
    args = _sweep(tmp_path, tmp_path / "s")
    args[args.index("--base-config") + 1] = str(tmp_path / "named.toml")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    back = _read_back(hub, BUCKET, tmp_path / "back")
    assert "exp/1/pretrain/sweep.json" in back and "exp/1/pretrain/trial_0000/config.json" in back
    assert not any(k.startswith("s/") for k in back)
    # the same named folder from another sweep directory (by --push-to-bucket over the base config's bucket), and
    # a run into it: refused before any work
    before = dict(hub.buckets[BUCKET])
    r = CliRunner().invoke(app, _sweep(tmp_path, tmp_path / "other", "--push-to-bucket", f"{BUCKET}/exp/1"))
    assert r.exit_code == 1 and len(_errors(r.output)) == 1, r.output
    assert f"hf://buckets/{BUCKET}/exp/1/pretrain holds the trials of another sweep (study pretrain, sweep id " in r.output
    for folder in ("exp/1", "exp/1/pretrain"):  # the sweep's folder, or its study's
        r = CliRunner().invoke(app, _pretrain(tmp_path / "r", f"{BUCKET}/{folder}"))
        assert r.exit_code == 1 and f"hf://buckets/{BUCKET}/{folder} holds the trials of a sweep (study pretrain)" in r.output
    assert hub.buckets[BUCKET] == before and not (tmp_path / "r").exists() and not (tmp_path / "other" / "pretrain").exists()
    r = CliRunner().invoke(app, _pretrain(tmp_path / "r", f"{BUCKET}/a/../b"))
    assert r.exit_code == 2 and "--push-to-bucket" in r.output and "owner/name/folder" in r.output, r.output
    r = CliRunner().invoke(app, _sweep(tmp_path, tmp_path / "s2", "--push-to-bucket", "no-owner"))
    assert r.exit_code == 2 and "--push-to-bucket 'no-owner': give the repository as owner/name" in r.output, r.output
    assert not (tmp_path / "s2").exists()
    # offline: one line before the sweep directory is made, the Hub not asked
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asked = len(hub.requests)
    r = CliRunner().invoke(app, _sweep(tmp_path, tmp_path / "s3"))
    assert r.exit_code == 1 and _errors(r.output) == [
        f"error: --push-to-bucket {BUCKET}: HF_HUB_OFFLINE=1 is set, and pushing needs the network; unset it, or drop "
        "the flag and upload later with `hf upload`"], r.output
    assert not (tmp_path / "s3").exists() and len(hub.requests) == asked
