"""``pawn bench``: where the time goes — compiled memory, engine, train step, MFU, data path,
concurrency, eval, decode, adapter training, vmapped populations against sequential trials (spec ``eval-probe-generate-sweep-bench.md`` §7).

One module per section (:mod:`~pawn.bench.memory`, :mod:`~pawn.bench.engine` with its child
process :mod:`~pawn.bench.engine_child`, :mod:`~pawn.bench.step`, :mod:`~pawn.bench.mfu`,
:mod:`~pawn.bench.data`, :mod:`~pawn.bench.concurrency`, :mod:`~pawn.bench.evaluation`,
:mod:`~pawn.bench.decode`); each returns a typed record (:mod:`~pawn.bench.records`).
:mod:`~pawn.bench.section` holds one :class:`Section` row per section, registered by the section's
own module (adding a section is a module plus its test); :mod:`~pawn.bench.runner` runs the
sections into one :class:`BenchReport`, whose ``to_dict()``
is the ``--json`` document, and :mod:`~pawn.bench.report` prints it through one column table
(each section module lays out its own table).

Timings are medians over repeated runs after warm-up, with min and max, and every timed call ends
in ``jax.block_until_ready``; the first call of a jitted function is reported apart as
``first_call_s`` and ``compile_s`` (first call minus the steady-state median: tracing plus XLA
compilation). Throughput "tokens" are padded sequence positions, ``B·T`` per step (spec §7.3).
Nothing is estimated except where a field says so (``compile_s`` and MFU's FLOP count, whose
formula is :data:`FLOPS_FORMULA`).
"""

from pawn.bench.adapt import bench_adapt
from pawn.bench.concurrency import bench_concurrency
from pawn.bench.data import bench_data
from pawn.bench.decode import bench_decode, decode_step_timing
from pawn.bench.engine import bench_engine, resolve_pgn_files
from pawn.bench.evaluation import bench_eval
from pawn.bench.memory import bench_memory
from pawn.bench.population import bench_population
from pawn.bench.mfu import (FLOPS_FORMULA, GPU_PEAKS, PEAK_SOURCE, TPU_PEAK_SOURCE, TPU_PEAKS, bench_mfu, lookup_gpu_peak,
                            lookup_tpu_peak, measure_matmul_peak, published_peak, step_flops_per_token)
from pawn.bench.records import Measurement, to_json
from pawn.bench.report import COLUMNS, print_report
from pawn.bench.runner import (REFERENCE_MACHINE, REFERENCE_SECTION_S, SECTIONS, BenchReport, estimate_line, finished_line,
                               estimate_seconds, header, parse_only, rescaled_estimates, run_bench)
from pawn.bench.section import Section, SectionContext, register
from pawn.bench.settings import QUICK_PRESET, BenchSettings, pretrain_optimizer
from pawn.bench.step import StepSetup, bench_step, fresh_state, make_setup
from pawn.bench.timing import common_window_rate, per_repetition_rates, rates, time_call, timing_stats
from pawn.config import flops_per_token

__all__ = [
    "BenchReport", "BenchSettings", "COLUMNS", "FLOPS_FORMULA", "GPU_PEAKS", "Measurement", "PEAK_SOURCE", "QUICK_PRESET",
    "REFERENCE_MACHINE", "REFERENCE_SECTION_S", "SECTIONS", "Section", "SectionContext", "StepSetup", "bench_adapt", "bench_concurrency", "bench_data", "bench_decode",
    "bench_engine", "bench_eval", "bench_memory", "bench_mfu", "bench_population", "bench_step", "common_window_rate", "decode_step_timing",
    "estimate_line", "estimate_seconds", "finished_line", "rescaled_estimates", "flops_per_token", "fresh_state", "header", "lookup_gpu_peak", "make_setup",
    "measure_matmul_peak", "parse_only", "per_repetition_rates", "pretrain_optimizer", "print_report", "rates", "register",
    "resolve_pgn_files", "run_bench", "step_flops_per_token", "time_call", "timing_stats", "to_json",
    "TPU_PEAKS", "TPU_PEAK_SOURCE", "lookup_tpu_peak", "published_peak",
]
