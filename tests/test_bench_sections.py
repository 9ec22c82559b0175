"""The ``pawn bench`` section table (issue 22): one :class:`pawn.bench.Section` row per section is
its only home — ``--only``, the run order, the estimate, the printed table and the ``--json``
document follow from it, so a section is its own module plus its test."""

from __future__ import annotations

import io
import pkgutil
from dataclasses import dataclass

import pytest
from rich.console import Console

import pawn.bench as bench
from pawn.bench import BenchSettings, Section, estimate_seconds, parse_only, print_report, register, run_bench
from pawn.bench.report import VIEWS, BenchColumn, TableView
from pawn.bench.section import SECTIONS as TABLE


def test_every_module_of_the_package_that_is_a_section_registers_one_row():
    modules = {m.name for m in pkgutil.iter_modules(bench.__path__)}
    registered = {row.run.__module__.rsplit(".", 1)[-1] for row in TABLE.values()}
    assert registered <= modules
    assert list(TABLE) == ["memory", "engine", "step", "mfu", "data", "concurrency", "eval", "decode", "adapt", "population"]
    assert [n for n, r in TABLE.items() if r.shared_setup] == ["step", "mfu", "data"]
    assert list(VIEWS) == list(TABLE) == list(bench.SECTIONS) == parse_only(None)


@dataclass
class _Echo:
    games: int


@pytest.fixture
def echo_section():
    """A section added the way a new module adds one: a record, run, view, estimate — one row."""
    row = register(Section("echo", 55, lambda s, ctx: _Echo(s.engine_games), lambda r: TableView(
        "echo", [BenchColumn("games", lambda v: f"{v:,}")], [{"games": r.games}]), (1.0, 4.0),
        lambda s: float(s.engine_games)))
    yield row
    del TABLE["echo"]
    bench.settings.set_section_names(tuple(TABLE))


def test_a_new_section_is_one_row(echo_section):
    s = BenchSettings.load(quick=True, engine_games=400)
    assert parse_only(["echo"]) == ["echo"] and parse_only(None).index("echo") == 5  # order 55: after data
    assert BenchSettings.load(quick=True, only="echo").only == ("echo",)  # --only accepts it
    assert estimate_seconds(s, ["echo"]) == {"echo": 0.5 * 1.0 + 0.5 * 1.0 * 400 / 200}  # quick reference: 200 games
    rep = run_bench(s, ["echo"])
    assert rep.completed_sections == ["echo"] and rep.to_dict()["echo"]["games"] == 400
    buf = io.StringIO()
    print_report(rep, Console(file=buf, width=120), header=False)
    assert "echo" in buf.getvalue() and "400" in buf.getvalue()


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="step"), "registered twice"),
    (dict(order=30), "order 30 is taken"),
    (dict(view=None), "view is not callable"),
    (dict(reference_s=(1.0,)), "reference_s"),
])
def test_a_half_added_section_is_refused(kwargs, match):
    base = dict(name="half", order=999, run=lambda s, c: None, view=lambda r: None, reference_s=(1.0, 2.0), work=lambda s: 1.0)
    with pytest.raises(TypeError, match=match):
        register(Section(**{**base, **kwargs}))
    assert "half" not in TABLE


@pytest.mark.parametrize("n,text", [(0, "0 B"), (512, "512 B"), (3_234_316, "3.08 MiB"), (186 * 2**20, "186 MiB"),
                                    (11.6 * 2**30, "11.6 GiB"), (2**30 - 2**18, "1.00 GiB"), (80e9, "74.5 GiB"), (None, "—")])
def test_size_text_writes_a_size_in_the_binary_unit_that_fits_it(n, text):
    from pawn.bench.report import size_text

    assert size_text(n) == text


def test_memory_table_writes_each_size_in_a_unit_that_tells_the_remat_modes_apart():
    """The toy step (batch 8 × seq 32) compiles to a few MiB: the table read 0.00/0.01 GiB in
    every cell and mixed GiB and GB in the fit headers; now every cell is the size in the unit
    that fits it and every header is in GiB (the JSON keeps bytes and GiB)."""
    from pawn.bench.memory import bench_memory, view
    from pawn.bench.report import render, size_text

    m = bench_memory(BenchSettings.load(variant="toy", batch_size=8, seq_len=32, remat="none"))
    (row,) = m.rows
    assert row.estimate["peak_bytes"] > 2**20 and row.estimate["peak_gib"] < 0.05  # JSON keeps both
    buf = io.StringIO()
    Console(file=buf, width=250).print(render(view(m)))
    out = buf.getvalue()
    header, cells = out.splitlines()[2], next(ln for ln in out.splitlines() if "│ none" in ln)
    assert " GB" not in header and "fits 16.0 GiB" in header and "fits 74.5 GiB" in header and "fits 131 GiB" in header
    for k in ("temp_bytes", "argument_bytes", "output_bytes", "peak_bytes"):
        assert f" {size_text(row.estimate[k])} " in cells and size_text(row.estimate[k]).endswith(" MiB")
    assert "0.00" not in cells and "0.01" not in cells
