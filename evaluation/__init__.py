"""Offline evaluation: one row type (rows), the metrics, the fallback expectation, thresholds,
the policies compared, leave-one-source-out, and the report. Needs nothing of training."""
