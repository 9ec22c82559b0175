"""Measuring what a backbone learned (spec ``eval-probe-generate-sweep-bench.md`` §1–§5).

- :mod:`pawn.evaluate.accuracy`: teacher-forced move accuracy, legality, game completion and
  the accuracy ceiling, in the published (v1) and moves-only conventions (§1, §5); Lichess
  Elo-stratified accuracy (§4.1).
- :mod:`pawn.evaluate.probes`: the nine linear probes on every layer (§2).
- :mod:`pawn.evaluate.generation`: autoregressive generation with a KV cache, its analysis
  metrics, and writing games to parquet/PGN (§3.1, §3.2, §3.4).
- :mod:`pawn.evaluate.diagnostics`: the five outcome-conditioned tests and the edge-case
  legality diagnostics (§3.3, §3.5).
"""
