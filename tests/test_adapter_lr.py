"""benchmarks/adapter_lr.py: the grid rule on a stub objective (the points it visits), and the rule,
cap and usage line agreeing with each other and with the documented command."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import adapter_lr  # noqa: E402


def bowl(best: float, seed_shift: dict[int, float] | None = None):
    """A val loss with its minimum at ``best`` (squared distance in decades), plus a per-seed shift."""
    shift = seed_shift or {}

    def objective(lr: float, seed: int) -> dict:
        return {"loss": 3.0 + (math.log10(lr) - math.log10(best)) ** 2 + shift.get(seed, 0.0)}

    return objective


LRS = [3e-4, 1e-3, 3e-3, 1e-2]


def test_the_grid_grows_to_ia3s_published_one_and_stops_when_the_best_is_inside():
    """IA³'s published stage 1: 3e-4 … 1e-2, then 3e-2, 1e-1, 3e-1 and 1e+0 (four extensions above);
    3e-1 is best and 1e+0 is worse, so the grid stops; the two best go on with seeds 1 and 2."""
    g = adapter_lr.grid_search(bowl(0.4), LRS, [0, 1, 2])
    assert g.visited == [(3e-4, 0), (1e-3, 0), (3e-3, 0), (1e-2, 0), (3e-2, 0), (1e-1, 0), (3e-1, 0), (1.0, 0),
                         (3e-1, 1), (3e-1, 2), (1.0, 1), (1.0, 2)]
    assert [adapter_lr.lr_name(x) for x in sorted(g.stage1)] == ["3e-04", "1e-03", "3e-03", "1e-02", "3e-02", "1e-01",
                                                                "3e-01", "1e+00"]
    assert g.chosen == 3e-1


def test_the_cap_stops_the_grid_at_an_end():
    g = adapter_lr.grid_search(bowl(5.0), LRS, [0, 1], max_extend=4)
    assert [lr for lr, _ in g.visited[:8]] == [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0]
    assert sorted(g.stage1)[-1] == 1.0  # still best at the end: four steps, then the cap
    three = adapter_lr.grid_search(bowl(0.4), LRS, [0], max_extend=3)
    assert max(three.stage1) == 3e-1  # the old default of 3 could not reach IA³'s published 1e+00


def test_the_low_side_grows_first_and_the_mean_over_seeds_chooses():
    # best near 1e-4: grows down to 1e-4 (and 3e-5, worse); seed 1 makes 3e-4 worse on average than 1e-4
    g = adapter_lr.grid_search(bowl(1.2e-4, {1: 0.0}), LRS, [0, 1], top=2)
    assert [lr for lr, s in g.visited if s == 0] == [3e-4, 1e-3, 3e-3, 1e-2, 1e-4, 3e-5]
    assert set(g.runs) == {1e-4, 3e-4} and g.chosen == 1e-4


def test_a_diverged_run_counts_as_worst_and_never_finalises():
    def objective(lr, seed):
        return {"loss": math.inf if lr >= 1e-2 else 3.0 - math.log10(lr) * 0.01}

    g = adapter_lr.grid_search(objective, LRS, [0, 1], top=2)
    assert g.chosen == 3e-3 and set(g.runs) == {3e-3, 1e-3}
    with pytest.raises(ValueError, match="at least one"):
        adapter_lr.grid_search(objective, [], [0])


def test_rule_cap_and_usage_line_agree_with_the_documented_command():
    doc = adapter_lr.__doc__
    usage = re.search(r"\[--max-extend (\d+)\]", doc)
    assert usage and int(usage.group(1)) == adapter_lr.MAX_EXTEND
    assert f"at most\n   ``--max-extend`` ({adapter_lr.MAX_EXTEND}) times per side" in doc
    a = adapter_lr.parser().parse_args(["b", "--data", "d", "--out", "o"])
    assert a.max_extend == adapter_lr.MAX_EXTEND and a.lrs == "3e-4,1e-3,3e-3,1e-2" and a.seeds == "0,1,2" and a.top == 2
    docs = (REPO / "docs" / "adapters.md").read_text()
    assert f"at most {adapter_lr.MAX_EXTEND} times per side" in docs
    assert "`python benchmarks/adapter_lr.py BACKBONE --data examples/lichess --out runs/lr`" in docs


def _block(nll, hits, n):
    return {"per_game": {"legal_nll": nll, "legal_hits": hits, "n_moves": n}}


def test_pairs_compare_per_seed_on_the_same_games_and_refuse_other_games():
    """Two strategies, three seeds, two games: B's loss is A's + 0.1 per position in every seed, and
    its hits the same, so A − B is −0.1 nats exactly (interval of zero width: a verdict for A)."""
    n = [10, 30]
    a = [_block([20.0 + s, 60.0 + 2 * s], [2, 9], n) for s in range(3)]
    b = [_block([21.0 + s, 63.0 + 2 * s], [2, 9], n) for s in range(3)]
    ra = {"strategy": "bottleneck", "held_out": {"test": {"blocks": a}}}
    rb = {"strategy": "lora", "held_out": {"test": {"blocks": b}}}
    c = adapter_lr.compare_pair(ra, rb, "test")
    assert c["loss"]["interval"]["estimate"] == pytest.approx(-0.1)
    assert (c["loss"]["interval"]["lo"], c["loss"]["interval"]["hi"]) == pytest.approx((-0.1, -0.1))
    assert c["loss"]["verdict"] == "bottleneck better" and c["top1"]["verdict"] == "no significant difference"
    row = adapter_lr.comparison_table({"bottleneck − lora": {"val": c, "test": c}}).splitlines()[-1]
    assert row.startswith("| bottleneck − lora | test | -0.100 [-0.100, -0.100]") and "| bottleneck better |" in row
    with pytest.raises(ValueError, match="held-out games differ"):
        adapter_lr.per_game([_block([1.0], [0], [5]), _block([1.0], [0], [6])])


def test_an_arms_excess_over_uniform_is_its_loss_less_e_ln_n_legal_over_seeds_and_games():
    """Three seeds on two games: each seed's excess is Σ(nll − ln N_legal) / Σ moves, the arm's the
    mean over seeds (0.25 here), inside the seeds-and-games interval; the table's test-excess column
    and the reference line (the backbone's excess with the interval its eval wrote) print them."""
    n, ln_n = [10, 30], [20.0, 50.0]
    blocks = [{"per_game": {"legal_nll": [20.0 + 2 * s, 60.0 + 2 * s], "legal_hits": [2, 9], "n_moves": n, "ln_n_legal": ln_n},
               "n_games": 2, "n_positions": 40, "uniform_loss_all_moves": 70 / 40, "uniform_top1_all_moves": 0.2,
               "backbone": {"loss_legal_masked_all_moves": 2.0, "top1_legal_masked_all_moves": 0.1,
                            "excess_nats_all_moves": 0.25, "excess_nats_lo": 0.2, "excess_nats_hi": 0.3}} for s in range(3)]
    f = adapter_lr.figures(blocks)
    per_seed = [(80 + 4 * s - 70) / 40 for s in range(3)]  # 0.25, 0.35, 0.45
    assert f["excess"]["estimate"] == pytest.approx(sum(per_seed) / 3)
    assert f["excess"]["estimate"] == pytest.approx(f["loss"]["estimate"] - 70 / 40)
    assert f["excess"]["lo"] < f["excess"]["estimate"] < f["excess"]["hi"] and f["excess"]["method"] == "seeds and games"
    rec = {"strategy": "lora", "lr": 1e-2, "trainable": 8, "movable": 8, "optimizer_steps": 100, "gradient_batches": 100,
           "stage1": {"1e-02": 3.0}, "held_out": {sp: {**f, "blocks": blocks} for sp in ("val", "test")}}
    row = adapter_lr.table([rec]).splitlines()[-1].split(" | ")
    assert row[8] == f"+{f['excess']['estimate']:.3f} [{f['excess']['lo']:+.3f}, {f['excess']['hi']:+.3f}]"
    refs = adapter_lr.references([rec])
    assert refs["test"]["backbone"]["excess"] == {"estimate": 0.25, "lo": 0.2, "hi": 0.3}
    assert refs["test"]["uniform"] == {"loss": 1.75, "top1": 0.2}
    assert "excess over uniform +0.250 [+0.200, +0.300] nats" in adapter_lr.reference_lines(refs)[1]
