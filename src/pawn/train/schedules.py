"""Compatibility home of the learning-rate schedules: they live in :mod:`pawn.schedules`, below
:mod:`pawn.settings`, which resolves them (spec ``training-and-adapters.md`` §2)."""

from pawn.schedules import SHOULD_REACH_ZERO, Schedule, ScheduleName, build_schedule

__all__ = ["SHOULD_REACH_ZERO", "Schedule", "ScheduleName", "build_schedule"]
