"""Tracking: `mlflow` (Tracker / NullTracker / MlflowTracker over a locked SQLite store) and
`logging` (rank-aware log records)."""
