"""A sweep study resumed across the run-record definition change (issue 43, item 2): which trials'
objective counts the end-of-game slot."""

from __future__ import annotations


def test_a_study_resumed_across_the_definition_change_says_which_trials_differ(tmp_path):
    """An adapter study holds the objective (best val loss) of every trial; trials finished before
    record schema 3 counted the end-of-game slot. :func:`finish_trial` stamps the schema, and the
    report's Sweep page names the older trials as not comparable."""
    import optuna

    from pawn.report.sweep import read_studies
    from pawn.runs import SCHEMA_VERSION
    from pawn.sweep.objective import finish_trial
    from pawn.sweep.trials import TrialOutcome

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=url)
    study.set_user_attr("run_type", "adapter")
    for x in (3.0, 2.9):  # finished by an older PAWN: no record_schema
        t = study.ask()
        study.tell(t, x)
    t = study.ask()
    study.tell(t, finish_trial(t, TrialOutcome(2.8, "step_limit", 4, None, {}), log=lambda m: None))
    assert study.trials[-1].user_attrs["record_schema"] == SCHEMA_VERSION
    (s,) = read_studies([url])
    assert [t["record_schema"] for t in s["trials"]] == [None, None, SCHEMA_VERSION]
    assert s["objective_note"].startswith("Trials 0, 1 finished before record schema 3")
    study.set_user_attr("run_type", "pretrain")  # pretraining's val loss did not change
    assert read_studies([url])[0]["objective_note"] is None
