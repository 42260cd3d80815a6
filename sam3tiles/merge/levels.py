"""The merge above the blocks, by levels: what the blocks' merges leave undecided (pieces that may meet
another block's) is merged by groups of FAN x FAN blocks, each group as soon as all its blocks are in, then
groups of groups, up to one group, the whole grid (`BlockMerger.finish`'s final pass).

Each group's pass is a task on the workers (`level_pass`): it decides every component that no tile outside
the group can reach and hands the rest up. So the end of a run merges only what lies near the top level's
few seams, and the driver holds only what a level hands on, not every piece near a block's edge (at 10^5
tiles one final pass of those took ~100 s and 1.4 GB after the last tile). The result is the one final
pass's: a component decided at a level has all its parts there (a part of another group's tile would lie
within reach of the group's edge, and its whole component would wait), and pairs are counted once, at the
level that first holds both (`block`: each piece's group one level down).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from ..tiling.frame import GridNear
from ..tiling.piecekey import tile_of
from ..vectorize.pieces import Pieces
from .packed import BlockPart, Packed, part_of
from .rules import merge_pass

#: Groups of FAN x FAN of the level below (blocks at the first level).
FAN = 4


@dataclass
class Rest:
    """Undecided pieces, in ascending `order`, with their `inside` and `near` flags and their group one level
    down (`below`: block ids at the first level)."""

    pieces: Packed
    order: np.ndarray
    inside: np.ndarray
    near: np.ndarray
    below: np.ndarray

    @classmethod
    def of(cls, part: BlockPart, below: int) -> "Rest":
        return cls(part.pieces, part.order, part.inside, part.near, np.full(len(part.order), below, np.int64))

    @classmethod
    def concat(cls, rests: list["Rest"]) -> "Rest":
        rests = [r for r in rests if len(r.order)]
        if not rests:
            e = np.zeros(0, np.int64)
            return cls(Packed.of(Pieces()), e, np.zeros(0, bool), np.zeros(0, np.uint8), e)
        order = np.concatenate([r.order for r in rests])
        sort = np.argsort(order, kind="stable")
        return cls(Packed.concat([r.pieces for r in rests]).take(sort), order[sort],
                   np.concatenate([r.inside for r in rests])[sort], np.concatenate([r.near for r in rests])[sort],
                   np.concatenate([r.below for r in rests])[sort])


def ring_windows(grid, rect: tuple[int, int, int, int], distance: float) -> np.ndarray:
    """The windows of the grid's tiles outside `rect` (rows r0:r1, columns c0:c1) that can lie within
    `distance` of a window inside it."""
    near = GridNear(grid)
    r0, r1, c0, c1 = rect
    k = near.span(distance)
    a, b = max(0, c0 - k), min(near.cols, c1 + k)
    out = []
    for y in range(max(0, r0 - k), min(near.rows, r1 + k)):
        spans = [(a, b)] if not r0 <= y < r1 else [(a, c0), (c1, b)]
        out.extend(near.windows(y, lo, hi) for lo, hi in spans if lo < hi)
    return np.concatenate(out) if out else np.zeros(0, dtype=object)


def level_pass(rest: Rest, frames: Mapping, grid, rect, reach: float, iou_min: float, ios_min: float,
               known: Mapping | None = None) -> BlockPart:
    """One group's pass (a task): decides what no tile outside `rect` can reach, hands the rest on."""
    foreign = ring_windows(grid, rect, 2 * reach)
    part = merge_pass(rest.pieces.unpack(Pieces), frames, iou_min, ios_min, order=rest.order, foreign=foreign,
                      reach=reach, inside=rest.inside, near=rest.near, block=rest.below, known=known)
    return part_of(part)


class Levels:
    """The groups of a grid's blocks (`GridBlocks`), level by level: what each has received from below and
    which of its members are still to come. `put` a member's rest (a block's, or a group's one level down);
    a group whose members are all in is `submit`ted (`level_pass`) and its future handed to `started`."""

    def __init__(self, blocks, grid, reach: float, submit: Callable, frames_of: Callable, started: Callable,
                 iou_min: float, ios_min: float):
        self.blocks, self.grid, self.reach = blocks, grid, reach
        self.submit, self.frames_of, self.started = submit, frames_of, started
        self.iou_min, self.ios_min = iou_min, ios_min
        side = blocks.block
        self.nb = (-(-blocks.rows // side), -(-blocks.cols // side))  # blocks per column and per row
        self.top = 1
        while FAN ** self.top < max(self.nb):
            self.top += 1
        self._held: dict[tuple[int, int], list[Rest]] = {}
        self._left: dict[tuple[int, int], set] = {}

    def _groups(self, level: int) -> tuple[int, int]:
        f = FAN ** level
        return -(-self.nb[0] // f), -(-self.nb[1] // f)

    def parent(self, level: int, member: int) -> int:
        """The group (at `level` + 1) of a block (`level` 0) or of a group of `level`."""
        if level == 0:
            br, bc = self.blocks.coords(np.asarray([member]))
            br, bc = int(br[0]), int(bc[0])
        else:
            br, bc = divmod(member, self._groups(level)[1])
        return (br // FAN) * self._groups(level + 1)[1] + bc // FAN

    def rect(self, level: int, group: int) -> tuple[int, int, int, int]:
        """A group's tiles: rows r0:r1, columns c0:c1 of the grid."""
        gr, gc = divmod(group, self._groups(level)[1])
        side = self.blocks.block * FAN ** level
        return (gr * side, min(self.blocks.rows, (gr + 1) * side), gc * side, min(self.blocks.cols, (gc + 1) * side))

    def _members(self, level: int, group: int) -> set:
        if level == 1:
            r0, r1, c0, c1 = self.rect(level, group)
            ids = (np.arange(r0, r1)[:, None] * self.blocks.cols + np.arange(c0, c1)[None, :]).ravel()
            return set(np.unique(self.blocks.of(ids)).tolist())
        gr, gc = divmod(group, self._groups(level)[1])
        rows, cols = self._groups(level - 1)
        return {r * cols + c for r in range(gr * FAN, min(rows, (gr + 1) * FAN))
                for c in range(gc * FAN, min(cols, (gc + 1) * FAN))}

    def put(self, level: int, member: int, part: BlockPart | None) -> None:
        """A member's pass is done (`part` None: it had no pieces): its rest goes to its group, which starts
        when it has all its members (the top level waits for `take`)."""
        key = (level + 1, self.parent(level, member))
        if part is not None and len(part.order):
            self._held.setdefault(key, []).append(Rest.of(part, member))
        if key[0] >= self.top:
            return
        left = self._left.get(key)
        if left is None:
            left = self._left[key] = self._members(*key)
        left.discard(member)
        if not left:
            self._start(key)

    def _start(self, key: tuple[int, int]) -> None:
        self._left.pop(key, None)
        rest = Rest.concat(self._held.pop(key, []))
        if not len(rest.order):
            self.put(key[0], key[1], None)
            return
        tiles = np.unique(tile_of(np.asarray(rest.pieces.columns["tile_key"], dtype=np.int64)))
        job = (rest, self.frames_of(tiles), self.grid, self.rect(*key), self.reach, self.iou_min, self.ios_min)
        self.started(key, self.submit(level_pass, job))

    def flush(self, level: int) -> bool:
        """Start every group of `level` still open (members that never came: blocks none of whose tiles
        ran); only once every pass below it is in. Whether any was started."""
        keys = sorted(k for k in set(self._left) | set(self._held) if k[0] == level)
        for key in keys:
            self._start(key)
        return bool(keys)

    def take(self) -> Rest:
        """The top level's rest, for the final pass (every level below it is in)."""
        return Rest.concat([r for k in sorted(self._held) for r in self._held[k]])
