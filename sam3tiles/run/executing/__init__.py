"""Executing: a plan's tiles run. `engine` (this process or a Dask cluster), `runner` (one input's tiles kept
in flight, their pieces handed to the merge), `submit` (the model loaded, tasks handed to the engine and their
results taken back), `tasks` (read -> infer -> vectorize on a worker), `points` (a point run's rounds),
`frames` (merged objects as output rows) and `quiet` (warnings filtered per run).

Imports `planning` and `recording`; neither imports it.
"""
