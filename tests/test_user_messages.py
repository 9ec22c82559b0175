"""Messages users read, through the real CLI: a paused run's progress line counts toward the run's
total, a chunk-size refusal names no value the user never set, a non-finite float flag is called
"not a finite number" whatever its range, and no user-facing text cites the project's internal spec."""

from __future__ import annotations

import ast
from pathlib import Path

from typer.testing import CliRunner

from pawn.cli import app

ROOT = Path(__file__).resolve().parents[1]
TOY = ["--variant", "toy", "--batch-size", "4", "--seq-len", "32", "--val-games", "0"]


def test_a_paused_runs_progress_line_counts_toward_the_runs_total(tmp_path):
    r = CliRunner().invoke(app, ["pretrain", *TOY, "--total-steps", "20", "--pause-after-steps", "2", "--steps-per-chunk", "2",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("pretrain: step ")]
    assert lines and lines[-1].startswith("pretrain: step 2/20 (paused) "), lines
    assert not any("2/2 " in ln or "100.0%" in ln for ln in lines), lines
    assert "paused at step 2" in r.output


def test_a_pause_off_the_default_chunk_names_no_chunk_size_the_user_never_set(tmp_path):
    r = CliRunner().invoke(app, ["pretrain", *TOY, "--total-steps", "20", "--pause-after-steps", "2", "--checkpoint-every", "10",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 2, r.output
    assert "steps_per_chunk (10)" not in r.output and "Traceback" not in r.output
    assert "--pause-after-steps (2) must be a positive multiple of the steps per compiled chunk, here 10" in r.output
    assert "set steps_per_chunk (e.g. 2)" in r.output and not (tmp_path / "run").exists()
    r = CliRunner().invoke(app, ["pretrain", *TOY, "--total-steps", "20", "--pause-after-steps", "2", "--steps-per-chunk", "10",
                                 "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "--pause-after-steps (2) must be a positive multiple of --steps-per-chunk (10)" in r.output


def test_a_non_finite_float_flag_is_not_a_finite_number_whatever_its_range(tmp_path):
    for cmd, flag, value in (("pretrain", "--checkpoint-every-minutes", "nan"), ("pretrain", "--lr", "nan"),
                             ("pretrain", "--hub-exit-wait-s", "inf"), ("adapt", "--checkpoint-every-minutes", "-inf")):
        r = CliRunner().invoke(app, [cmd, *(TOY + ["--total-steps", "20"] if cmd == "pretrain" else []), flag, value,
                                     "--out", str(tmp_path / "run")])
        assert r.exit_code == 2, (flag, r.output)
        assert f"{flag}: Input should be a finite number" in r.output, (flag, r.output)
        assert "greater than" not in r.output
    r = CliRunner().invoke(app, ["pretrain", *TOY, "--total-steps", "20", "--checkpoint-every-minutes", "-1", "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "--checkpoint-every-minutes: Input should be greater than or equal to 0" in r.output
    r = CliRunner().invoke(app, ["pretrain", "--help"], env={"COLUMNS": "400"})
    assert "no longer and a killed run loses no more. At least 0." in " ".join(r.output.split()), r.output


def test_the_sweep_search_space_error_names_the_built_in_space_not_the_spec(tmp_path):
    base = tmp_path / "base.toml"
    base.write_text('variant = "toy"\ntotal_steps = 1000\n')
    r = CliRunner().invoke(app, ["sweep", "--run-type", "pretrain", "--base-config", str(base), "--trials", "1",
                                 "--out", str(tmp_path / "sweep")])
    assert r.exit_code != 0
    assert ("built-in search space 'pretrain' (pawn.sweep.space.SPACES): warmup_steps = 5000: warmup_steps (5000) must be "
            "≥ 0 and < total_steps (1000)") in r.output, r.output
    assert "spec" not in r.output and not (tmp_path / "sweep").exists()


def _user_facing_strings(path: Path):
    """Every string constant of a module that is not a docstring (a module, class or function's
    first statement) or another bare string statement: messages, help texts, model cards."""
    tree = ast.parse(path.read_text("utf-8"))
    bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in bare:
            yield n.lineno, n.value


def test_no_user_facing_text_cites_the_internal_spec():
    """Users have the package and its docs, not the project's spec: no message, help text or
    model card may send them to "spec §N" (the CLI help strips such references from field
    descriptions; ``pawn.cli._options`` holds the patterns that do it)."""
    cites = []
    for path in sorted((ROOT / "src" / "pawn").rglob("*.py")):
        if path.name == "_options.py" and path.parent.name == "cli":
            continue  # the patterns that remove spec references from help texts
        for line, text in _user_facing_strings(path):
            if "§" in text or "shared/spec" in text:
                cites.append(f"{path.relative_to(ROOT)}:{line}: {text[:80]!r}")
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        cites += [f"{doc.relative_to(ROOT)}: {ln.strip()[:80]!r}" for ln in doc.read_text("utf-8").splitlines() if "spec §" in ln]
    assert cites == []
