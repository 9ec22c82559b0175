"""``pawn adapt`` defaults and output of issue 26: ``--seq-len`` defaults to the backbone's trained
context, and each validation is printed as a line when it happens."""

from __future__ import annotations

import json

import pytest

from pawn.train.adapt import run_adapt
from pawn.train.adapt_config import AdaptSettings


def _settings(tiny_backbone, shared_data, tmp_path, **kw) -> AdaptSettings:
    base = dict(backbone=str(tiny_backbone), strategy="film", data=str(shared_data / "lichess"), elo_min=1200, elo_max=2200,
                epochs=1, steps_per_epoch=2, steps_per_chunk=2, batch_size=4, val_games=16, data_seed=7,
                cache_dir=str(tmp_path / "cache"), out=str(tmp_path / "run"))
    base.update(kw)
    return AdaptSettings.load(**base)



@pytest.mark.slow  # a real adapt run (~1 min on a shared CPU); CI runs -m slow
def test_seq_len_defaults_to_the_backbones_trained_context_and_validations_print(tiny_backbone, shared_data, tmp_path, capsys):
    lines: list[str] = []
    res = run_adapt(_settings(tiny_backbone, shared_data, tmp_path), log=lines.append, progress=True,
                    install_signal_handlers=False)
    printed = capsys.readouterr().out.splitlines()  # not a terminal: plain progress lines and the validation lines
    assert res.step == 2
    assert "seq_len 128: the backbone's trained context (--seq-len sets another)" in lines
    assert not any("longer than the" in m for m in lines), lines  # the old default 256 warned here
    assert json.loads((res.run_dir / "config.json").read_text())["seq_len"] == 128
    # the end-of-epoch validation (step 2) as a line, with its val record's figures
    from pawn.runs import open_run

    val = next(r.values for r in open_run(res.run_dir).val if r.step == 2)
    want = f"validation at step 2 (epoch 1): loss {val['loss']:.4f}, top-1 {100 * val['top1']:.1f}%, top-5 {100 * val['top5']:.1f}%"
    assert any(m.startswith(want) for m in printed), (want, printed)


@pytest.mark.slow
def test_a_given_seq_len_is_kept(tiny_backbone, shared_data, tmp_path):
    lines: list[str] = []
    res = run_adapt(_settings(tiny_backbone, shared_data, tmp_path, seq_len=64), log=lines.append, progress=False,
                    install_signal_handlers=False)
    assert json.loads((res.run_dir / "config.json").read_text())["seq_len"] == 64
    assert not any("trained context" in m for m in lines)
