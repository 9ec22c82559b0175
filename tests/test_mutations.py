"""A small mutation list (issue 25): each entry plants one bug that PAWN's own tests once missed in a
copy of ``src/`` and runs the tests written to catch it; every one of them must fail. Slow (each
entry trains a few steps): CI's ``pytest -m slow`` runs it.

Add an entry when a test is written for a bug a wrong implementation used to pass: the file, the
exact text and its replacement (the text must occur once, so a refactor that moves it fails here
loudly instead of silently testing nothing), and the test ids that must fail. :data:`LEGITIMATE` is
the other side: a change a maintainer may make without editing a test, on which the tests named must
still pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def _resume_rule_copy() -> str:
    """The spine's resume rule pasted into a task module under another name, its variables renamed."""
    import ast

    src = (ROOT / "src" / "pawn" / "train" / "spine.py").read_text("utf-8")
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "resolve_resume")
    return ast.get_source_segment(src, fn).replace("def resolve_resume(", "def _reconcile_resume(").replace("mutable", "may_change")


def _refuse_new_strategies() -> str:
    """build_adapted refusing every strategy but those shipped now (a drop-in file is refused)."""
    from pawn.adapters import STRATEGIES

    return (f"    st = get_strategy(strategy)\n    if st.name not in {tuple(STRATEGIES)!r}:\n"
            f"        raise AdapterConfigError(f\"unknown strategy {{strategy!r}}\")\n")


MUTATIONS = {
    "adapter training loss ignores the legal mask and the penalty": (
        "pawn/train/adapt.py",
        "    loss_fn = make_adapter_loss(**loss_kw)\n",
        "    loss_fn = make_adapter_loss(legal_mask=False, illegal_penalty=0.0, dtype=dtype)\n",
        ["tests/test_adapt_pins.py::test_the_training_loss_follows_the_legal_mask_flags_through_the_cli"]),
    "RoSA warm-up under a cosine instead of a constant lr": (
        "pawn/train/rosa_phases.py",
        'schedule = build_schedule("constant", lr, W, 0)',
        'schedule = build_schedule("cosine", lr, W, 0)',
        ["tests/test_adapt_pins.py::test_rosa_warmup_runs_at_the_constant_peak_lr_and_the_backbone_stays_bit_identical"]),
    "pawn adapt's default LoRA rank is not the spec's 4 (the strategy row, the CLI default's only home)": (
        "pawn/adapters/strategies/lora.py",
        '    rank: int = Field(4, ge=1, description="LoRA rank r.")',
        '    rank: int = Field(8, ge=1, description="LoRA rank r.")',
        ["tests/test_adapt_pins.py::test_cli_adapt_trains_the_spec_defaults"]),
    "the backbone trains during pawn adapt": (
        "pawn/adapters/adapted.py",
        "lambda x: bool(self.adapter.trains_backbone and eqx.is_array(x))",
        "lambda x: bool(eqx.is_array(x))",
        ["tests/test_adapt_pins.py::test_rosa_warmup_runs_at_the_constant_peak_lr_and_the_backbone_stays_bit_identical"]),
    "the Hub push sends an empty adapter file": (
        "pawn/hub/push.py",
        "ops.append(CommitOperationAdd(path_in_repo=job.repo_path(p.name), path_or_fileobj=str(p)))",
        'ops.append(CommitOperationAdd(path_in_repo=job.repo_path(p.name), path_or_fileobj=b"" if p.name == "adapter.safetensors" else str(p)))',
        ["tests/test_hub.py::test_adapt_pushes_its_checkpoints_with_the_adapter_weights"]),
    "population members other than the first keep member 0's weights (all but one leaf)": (
        "pawn/sweep/population.py",
        "jax.tree_util.tree_leaves(a))\n",
        "[y if i == 2 else x for i, (x, y) in enumerate(zip(jax.tree_util.tree_leaves(arrays[0]), jax.tree_util.tree_leaves(a)))])\n",
        ["tests/test_sweep_adapt_population.py::test_population_members_start_from_their_own_init_scale"]),
    "pretraining validation keeps a hand-written key list": (
        "pawn/train/pretrain.py",
        "        per_variant[name] = {k: vals[k] for k in VAL_METRICS if k in vals}\n",
        '        per_variant[name] = {k: vals[k] for k in ("loss", "perplexity", "top1", "top5", "legal_rate", "late_legal_rate", '
        '"completion_rate", "avg_plies_completed", "avg_pct_completion", "median_forfeit_ply", "moves_only_top1") if k in vals}\n',
        ["tests/test_task_metrics.py::test_pretrain_validation_carries_exactly_its_views_rows"]),
    "the task builds before --out is checked": (
        "pawn/train/spine.py",
        "        check_outputs(cfg, out)\n",
        "        task.build(ck, stop)\n        check_outputs(cfg, out)\n",
        ["tests/test_task_order.py::test_every_refusal_of_out_comes_before_any_build"]),
    "a renamed copy of the resume rule in train/pretrain.py": (
        "pawn/train/pretrain.py",
        "def _check_fresh(cfg: PretrainConfig) -> None:\n",
        _resume_rule_copy() + "\n\n\ndef _check_fresh(cfg: PretrainConfig) -> None:\n",
        ["tests/test_task_order.py::test_no_task_module_holds_a_renamed_copy_of_a_spine_function"]),
    "pretraining validation drops one key of its view (late_legal_rate)": (
        "pawn/train/pretrain.py",
        "        vals = eval_values(rep)\n",
        '        vals = {k: v for k, v in eval_values(rep).items() if k != "late_legal_rate"}\n',
        ["tests/test_metric_rows.py::test_each_task_validates_a_toy_model_into_the_records_the_report_reads"]),
    "pretraining validation renames a key of its view (perplexity written as ppl)": (
        "pawn/train/pretrain.py",
        "        vals = eval_values(rep)\n",
        '        vals = {("ppl" if k == "perplexity" else k): v for k, v in eval_values(rep).items()}\n',
        ["tests/test_metric_rows.py::test_each_task_validates_a_toy_model_into_the_records_the_report_reads"]),
    "pretraining validation keeps a hand-written key list (seen by the records and the report)": (
        "pawn/train/pretrain.py",
        "        per_variant[name] = {k: vals[k] for k in VAL_METRICS if k in vals}\n",
        '        per_variant[name] = {k: vals[k] for k in ("loss", "perplexity", "top1", "top5", "legal_rate", "late_legal_rate", '
        '"completion_rate", "avg_plies_completed", "avg_pct_completion", "median_forfeit_ply", "moves_only_top1", '
        '"legal_masked_loss_all_moves", "uniform_legal_loss", "excess_nats", "excess_nats_lo", "excess_nats_hi") if k in vals}\n',
        ["tests/test_metric_rows.py::test_a_new_metric_row_shows_in_records_report_dashboard_and_card"]),
    "build_adapted refuses any strategy but the shipped ones (a drop-in strategy file)": (
        "pawn/adapters/adapted.py",
        "    st = get_strategy(strategy)\n",
        _refuse_new_strategies(),
        ["tests/test_strategy_file.py::test_a_strategy_file_trains_for_one_chunk_through_pawn_adapt"]),
    "the resume rule drops one tagged field (keep_checkpoints) from what a resume may change": (
        "pawn/train/spine.py",
        "    mutable = resume_mutable(cfg)\n",
        '    mutable = resume_mutable(cfg) - {"keep_checkpoints"}\n',
        ["tests/test_spine.py::test_every_field_tagged_mutable_on_resume_is_accepted_and_every_other_refused"]),
    "the resume rule accepts any changed setting": (
        "pawn/train/spine.py",
        "    conflicts = sorted(k for k, v in given.items() if k not in mutable and stored.get(k) != v)\n",
        "    conflicts = []\n",
        ["tests/test_spine.py::test_every_field_tagged_mutable_on_resume_is_accepted_and_every_other_refused"]),
    "retro-sparse reports the norms of the LoRA it discarded": (
        "pawn/adapters/strategies/rosa.py",
        '        if self.lora is not None and self.mode == "rosa":',
        '        if self.lora is not None and (self.phase == PHASE_WARMUP or self.mode == "rosa"):',
        ["tests/test_rosa.py::test_weight_reports_per_phase"]),
}


LEGITIMATE = {
    "a metric row joins the pretraining validation (top-1 over the ceiling, one view added to its row)": (
        "pawn/metrics.py",
        'moves_only_key="moves_only/top1_over_ceiling", views={"eval_table": 5, "compare": 4}),',
        'moves_only_key="moves_only/top1_over_ceiling", views={"pretrain_val": 17, "eval_table": 5, "compare": 4}),',
        ["tests/test_metric_rows.py", "tests/test_task_metrics.py"]),
}
"""Changes a maintainer may make without touching a test: the tests named must still PASS on them
(a test that pins what the change legitimately moves is over-strict)."""


def _mutant(tmp: Path, rel: str, old: str, new: str) -> Path:
    src = tmp / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    f = src / rel
    text = f.read_text()
    assert text.count(old) == 1, f"{rel}: the mutated text occurs {text.count(old)} times; update the mutation list"
    f.write_text(text.replace(old, new))
    import importlib.util

    engine = Path(importlib.util.find_spec("pawn._engine").origin)  # an installed (non-editable) PAWN keeps it elsewhere
    if not (src / "pawn" / engine.name).exists():
        shutil.copy2(engine, src / "pawn" / engine.name)
    return src


def _tests_on_copy(tmp: Path, entry: tuple, *pytest_args: str) -> subprocess.CompletedProcess:
    """The entry's tests (``(file, old, new, test ids)``) run on a copy of ``src/`` with the change,
    once the copy is checked to be the package they import."""
    rel, old, new, tests = entry
    src = _mutant(tmp, rel, old, new)
    env = {**os.environ, "PYTHONPATH": str(src), "JAX_PLATFORMS": "cpu"}
    check = subprocess.run([sys.executable, "-c", "import pawn, pawn._engine; print(pawn.__file__)"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.strip().startswith(str(src)), (check.stdout, check.stderr[-2000:])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *pytest_args, "-p", "no:cacheprovider", "-m", "slow or not slow",
                           "--rootdir", str(ROOT), *tests], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_the_targeted_tests_fail_on_the_mutant(name, tmp_path):
    r = _tests_on_copy(tmp_path, MUTATIONS[name], "-x")
    assert r.returncode == 1, f"{name}: expected the tests to FAIL on the mutant (exit 1), got {r.returncode}\n{r.stdout[-3000:]}"
    assert " failed" in r.stdout.splitlines()[-1], r.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LEGITIMATE))
def test_the_targeted_tests_pass_on_a_legitimate_change(name, tmp_path):
    r = _tests_on_copy(tmp_path, LEGITIMATE[name])
    assert r.returncode == 0, f"{name}: expected the tests to PASS on the change, got {r.returncode}\n{r.stdout[-3000:]}"
    assert " passed" in r.stdout.splitlines()[-1] and "failed" not in r.stdout.splitlines()[-1], r.stdout[-2000:]
