"""Checkpoints of a point run: each point task's answers in the run's tile store (`run.recording.checkpoint.TileStore`).

A point run goes in rounds (the tiles holding points, the zoom-outs, the tiles objects are followed into), and
each round's asks follow from the answers before it. So a task's answers are stored under a key of everything
that decides them: the window (a grid tile or a zoomed-out one) and the pixels it reads, the model, the
options that shape the answer, and the asks themselves (each object's index and its clicks). A rerun of the
same command asks the same first round, finds its answers, so asks the same next round, and so on: it
recomputes only what the killed run had not stored, and writes the same rows.

A task's answers are stored as a `TileResult` in the store's own row format (data, never code): one piece per
ask that found a mask, its `prompt` the ask's place in the task, `tile_key` the object's index, `edge_dist` the
share of the window its mask covers; an ask with no piece answered nothing (`point_tile_task`'s row for it).
Each task's row is written in its own transaction as it finishes, so a run killed at any point loses at most
the tasks in flight.
"""

from __future__ import annotations

import os
import signal

from ...tiling.grid import Tile
from ...vectorize.pieces import Pieces
from .checkpoint import TileResult, TileStore, tile_key

#: Test hook: the process kills itself (SIGKILL) once this many point tasks are stored, a forced point to
#: kill a run at (tests/test_point_resume.py), with no timing involved.
KILL_AFTER = "SAM3TILES_TEST_KILL_AFTER_POINT_TASKS"


def point_key(base: dict, tile: Tile, clicked: list) -> str:
    """The store key of one point task: `base` (source identity, model, options) with the window and the
    asks ((object index, clicks) each, clicks as (x, y, positive) in the window's pixels)."""
    return tile_key({**base, "kind": "points",
                     "tile": [tile.x0, tile.y0, tile.size, tile.valid_wh, tile.scale_xy,
                              list(tile.src_transform)[:6], tile.interior, tile.core_xyxy],
                     "asks": [[i, [[c.xy[0], c.xy[1], c.positive] for c in clicks]] for i, clicks in clicked]})


def to_result(tile: Tile, answers: list, seconds: dict) -> TileResult:
    """A task's answers ((object index, geometry or None, score, complete, share) per ask) as a stored row."""
    p = Pieces()
    for j, (i, geom, score, complete, share) in enumerate(answers):
        if geom is None:
            continue
        p.geometry.append(geom)
        p.score.append(float(score))
        p.prompt.append(j)
        p.tile_key.append(int(i))
        p.complete.append(bool(complete))
        p.edge_dist.append(float(share))
    return TileResult(tile.index, p, seconds=dict(seconds))


def from_result(result: TileResult, clicked: list) -> list | None:
    """The answers `to_result` stored, in the task's ask order; None where the row does not fit the asks."""
    p = result.pieces
    got = {}
    for j, i, g, s, c, share in zip(p.prompt, p.tile_key, p.geometry, p.score, p.complete, p.edge_dist):
        if not 0 <= j < len(clicked) or clicked[j][0] != i or j in got:
            return None
        got[j] = (i, g, float(s), bool(c), float(share))
    return [got.get(j, (i, None, 0.0, True, 0.0)) for j, (i, _) in enumerate(clicked)]


class PointStore:
    """A point run's view of the tile store (None: not checkpointing): look a task up, store one."""

    def __init__(self, store: TileStore | None):
        self.store, self.stored, self.reused = store, 0, 0
        kill = os.environ.get(KILL_AFTER, "")
        self.kill_after = int(kill) if kill.isdigit() else None

    def get(self, key: str, clicked: list) -> list | None:
        if self.store is None:
            return None
        row = self.store.get(key)
        answers = None if row is None else from_result(row, clicked)
        self.reused += answers is not None
        return answers

    def put(self, key: str, tile: Tile, answers: list, seconds: dict) -> None:
        if self.store is None:
            return
        self.store.put_many([(key, to_result(tile, answers, seconds))])
        self.stored += 1
        if self.kill_after is not None and self.stored >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
