"""The run: one job from its options to its outputs, over the stages. `plan` decides everything before the
first tile (`RunPlan`; `inputs` the inputs as expanded, `outputs` the paths it writes, `preflight` its checks,
`targets`, `limits`), `workfolder` is the folder of the checkpoints and its record of the outputs; `pipeline`
executes a plan (`segment_job`, `execute`) on the `engine` (this process or a Dask cluster); `runner` keeps one
input's tiles in flight (`tasks`: read -> infer -> vectorize; `submit`: the model loaded, tasks handed to the
engine and their results taken back), stores each in the `checkpoint` and hands its pieces to the merge;
`frames` turns merged objects into output rows, written through `writers`; `report` is the end-of-run
`RunReport`. Beside them: `progress` (the bar), `quiet` (warnings filtered per run) and `tilelayer` (the tiles
`sam3tiles plan` writes).

This file imports nothing: `import sam3tiles` imports `run.limits` first, before numpy and pyarrow load
(`limits.ease_reservations`).
"""
