"""Planning: everything a run decides before its first tile. `plan` (`plan_run`, `RunPlan`, `InputPlan`) over
`inputs` (the inputs as expanded), `once` (each input once), `maps` (which files form one map) on its `lattice`
and `anchor`, `area` (the tiles an area of interest or a slide's tissue skips), `outputs` (the paths a run
writes, the output's columns), `targets`, `preflight` (its checks), `limits` (the address space), `cluster`
(the scheduler's address, the local cluster's threads) and `tilelayer` (the tiles `sam3tiles plan` writes).

Imports only `recording` beside it (the work folder a plan checks, the report's lines): nothing that runs.
"""
