"""Pretraining: LR schedules, losses, the K-step compiled loop, metrics and run lifecycle."""
