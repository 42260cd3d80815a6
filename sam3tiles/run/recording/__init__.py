"""Recording: what a run keeps and tells. `checkpoint` (`TileStore`: each tile's `TileResult` as a row, keyed
by all that decides it), `pointstore` (a point task's answers in that store), `workfolder` (the checkpoints'
folder and its record of the outputs), `report` (the end-of-run `RunReport`) and `progress` (the bar).

Imports nothing of `planning` or `executing`.
"""
