"""The run: one job from its options to its outputs, over the stages, in three folders by what a reader looks
for, and the conductor above them:

- `planning`: everything decided before the first tile (`plan.plan_run` -> `RunPlan`; inputs, maps, areas,
  outputs, checks, limits);
- `executing`: the tiles run (`engine`, `runner`, `submit`, `tasks`, `points`) and merged objects made rows
  (`frames`);
- `recording`: what a run keeps and tells (`checkpoint`, `pointstore`, `workfolder`, `report`, `progress`);
- `pipeline`: plan -> engine -> tiles -> merge -> write (`segment_job`, `execute`).

Arrows point down only: executing -> planning -> recording (executing also -> recording); pipeline imports
all three (tests/test_run_folders.py holds it).

This file imports nothing: `import sam3tiles` imports `run.planning.limits` first, before numpy and pyarrow
load (`limits.ease_reservations`); the folders' own `__init__` files import nothing either.
"""
