"""The merge by spatial blocks: the same objects as `merge_pieces`, with memory that follows the objects.

A block of tiles is merged as soon as its last tile is in (on a Dask worker or here); only the pieces near
other blocks wait for a small final pass. Pieces and objects cross processes as WKB (`Packed`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Mapping, MutableMapping

import numpy as np
import shapely

from ..tiling.frame import GridNear, GridTiles, TileFrame, TileFrames, grid_windows
from ..tiling.piecekey import ORDER_TILE, piece_order, tile_of
from ..vectorize.pieces import Pieces
from .early import EarlyLinks
from .levels import Levels, Rest
from .packed import BlockPart, Packed, part_of
from .parts import IOS_MIN, IOU_MIN, Merged
from .rules import merge_pass, merge_pieces
from .stats import MergeStats


def merge_block(pieces: Packed, order, frames: Mapping[int, TileFrame], foreign, reach: float,
                iou_min: float = IOU_MIN, ios_min: float = IOS_MIN, known: Mapping | None = None) -> BlockPart:
    """The merge of one block of tiles (a Dask task): `frames` holds the block's tiles, `foreign` the
    windows of other tiles within `reach` of them; `known`: rule 2's verdicts computed before (`early`)."""
    return part_of(merge_pass(pieces.unpack(Pieces), frames, iou_min, ios_min, order=order, foreign=foreign,
                              reach=reach, known=known))


#: Block ids: (row // block) x BLOCK_ROW + col // block (a grid of fewer than this many columns of blocks).
BLOCK_ROW = 1_000_003


def tile_blocks(tiles, block: int) -> dict[int, int]:
    """Tile index -> block id: squares of `block` x `block` tiles of the grid."""
    out = {}
    for t in tiles:
        out[t.index] = (t.row // block) * BLOCK_ROW + (t.col // block)
    return out


class GridBlocks(MutableMapping):
    """Tile index -> block id of every tile of a grid of `shape` (rows, cols), by index arithmetic: nothing
    held per tile (a dict of a 10^6-tile grid took ~100 MB). Squares of `block` x `block` tiles, as
    `tile_blocks` gives them (`block` 0: one block, 0, for all); `alone` (a bool per tile, or None): tiles
    in a block of their own, -1 - index. Tiles set later (sub-tiles, indexed past the grid) are kept."""

    def __init__(self, shape: tuple[int, int], block: int, alone: np.ndarray | None = None):
        self.rows, self.cols = int(shape[0]), int(shape[1])
        self.n, self.block = self.rows * self.cols, int(block)
        self.alone = None if alone is None or not np.any(alone) else np.asarray(alone, dtype=bool)
        self.extra: dict[int, int] = {}

    def with_alone(self, alone: np.ndarray) -> "GridBlocks":
        return GridBlocks((self.rows, self.cols), self.block, alone)

    def of(self, ids: np.ndarray) -> np.ndarray:
        """The blocks of grid tiles `ids` (an array)."""
        ids = np.asarray(ids, dtype=np.int64)
        r, c = np.divmod(ids, self.cols)
        out = (r // self.block) * BLOCK_ROW + c // self.block if self.block > 0 else np.zeros(len(ids), np.int64)
        return np.where(self.alone[ids], -1 - ids, out) if self.alone is not None else out

    def __getitem__(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self.n:
            return self.extra[i]
        if self.alone is not None and self.alone[i]:
            return -1 - i
        if self.block <= 0:
            return 0
        r, c = divmod(i, self.cols)
        return (r // self.block) * BLOCK_ROW + c // self.block

    def __setitem__(self, i: int, b: int) -> None:
        i = int(i)
        if 0 <= i < self.n:
            if self[i] != b:
                raise ValueError(f"grid tile {i} is in block {self[i]}, not {b}")
            return
        self.extra[i] = int(b)

    def __delitem__(self, i: int) -> None:
        raise TypeError("a tile's block cannot be removed")

    def __contains__(self, i: object) -> bool:
        return isinstance(i, (int, np.integer)) and (0 <= i < self.n or int(i) in self.extra)

    def __iter__(self) -> Iterator[int]:
        yield from range(self.n)
        yield from self.extra

    def __len__(self) -> int:
        return self.n + len(self.extra)

    def coords(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (row, column) of blocks `ids` in the grid of blocks; a tile in a block of its own: its
        place's."""
        ids = np.asarray(ids, dtype=np.int64)
        br, bc = np.divmod(np.maximum(ids, 0), BLOCK_ROW)
        alone = ids < 0
        if alone.any():
            r, c = np.divmod(-1 - ids[alone], self.cols)
            br[alone], bc[alone] = r // max(self.block, 1), c // max(self.block, 1)
        return br, bc

    def grid_members(self, b: int) -> np.ndarray:
        """The grid tiles of block `b`, ascending (not the tiles set later)."""
        if b < 0:
            i = -1 - b
            return np.asarray([i] if i < self.n and self.alone is not None and self.alone[i] else [], np.int64)
        if self.block <= 0:
            ids = np.arange(self.n, dtype=np.int64) if b == 0 else np.zeros(0, np.int64)
        else:
            br, bc = divmod(int(b), BLOCK_ROW)
            rr = np.arange(br * self.block, min(self.rows, (br + 1) * self.block))
            cc = np.arange(bc * self.block, min(self.cols, (bc + 1) * self.block))
            ids = (rr[:, None] * self.cols + cc[None, :]).ravel().astype(np.int64)
        return ids[~self.alone[ids]] if self.alone is not None else ids

    def has(self, b: int) -> bool:
        """Whether block `b` has a grid tile."""
        if self.block <= 0 and b == 0:
            return self.alone is None or not self.alone.all()
        return (b < 0 or self.block > 0) and len(self.grid_members(b)) > 0

    def single(self) -> bool:
        """Whether every grid tile is in one block."""
        alone = 0 if self.alone is None else int(self.alone.sum())
        if alone:
            return self.n == 1
        rows, cols = (1, 1) if self.block <= 0 else (-(-self.rows // self.block), -(-self.cols // self.block))
        return rows * cols <= 1



@dataclass
class FinalPart:
    """The final pass's decided objects, their order keys and statistics."""

    objects: Packed  # Merged
    first: np.ndarray
    stats: MergeStats


def final_pass(rest: Packed, frames: Mapping[int, TileFrame], order, iou_min: float, ios_min: float, inside,
               near, block, known) -> FinalPart:
    """The merge's final pass over the pieces the blocks left undecided (a task, or here)."""
    fin = merge_pass(rest.unpack(Pieces), frames, iou_min, ios_min, order=order, inside=inside, near=near,
                     block=block, known=known)
    return FinalPart(Packed.of(fin.merged), fin.first, fin.stats)


class BlockMerger:
    """`merge_pieces` by spatial partition, fed tile by tile as tiles finish.

    A block of tiles is merged (`submit(merge_block, job)`: on Dask workers, or here) as soon as its last
    tile arrives, and its pieces are dropped: only decided objects (as WKB) and the few pieces near block
    edges wait for the small final pass of `finish`, so memory follows the objects, not the pieces of
    the whole image. The result equals `merge_pieces` over all pieces in tile order: same objects, same
    order, same statistics.

    `on_block(objects: Packed, first: np.ndarray)`: when given, decided objects are handed over as soon as
    their block's merge is in (`drain`) instead of being held until `finish`; `first` is each object's
    order key (sorting by it gives `merge_pieces`'s order). `finish` then returns no objects, only the
    statistics, and memory no longer follows the objects either.

    `early`: rule 2's verdicts are computed here as tiles arrive (`early.EarlyLinks`: for the in-process
    engine, whose driver waits between tiles), so a block's merge after its last tile has less to do.

    A grid's blocks handed over (`on_block`) and merged by `submit`: what blocks leave undecided is merged by
    groups of blocks as their blocks come in, then groups of groups (`merge.levels`), so the final pass
    holds only what lies near the top level's seams.
    """

    def __init__(self, frames: Mapping[int, TileFrame], blocks: Mapping[int, int], submit=None,
                 iou_min: float = IOU_MIN, ios_min: float = IOS_MIN, on_block=None, early: bool = False,
                 remote_final: bool = False):
        self.on_block = on_block
        self.remote_final = remote_final  # the final pass a task too (`submit`), gathered by `finish`'s gather
        self.emitted = 0  # objects handed to on_block
        self.frames = frames if isinstance(frames, TileFrames) else dict(frames)  # lazy ones stay lazy
        self.submit = submit
        self.iou_min, self.ios_min = iou_min, ios_min
        grid = isinstance(blocks, GridBlocks) and isinstance(frames, TileFrames) and isinstance(frames.tiles, GridTiles)
        # a grid's every tile (a run's): its windows and blocks by index arithmetic, nothing held per tile
        self.blocks = blocks if grid else dict(blocks)
        self._near = _GridWindows(frames.grid, blocks) if grid else _TreeWindows(self.frames, self.blocks)
        self.reach = self._near.reach
        self._waiting: dict[int, set] = {}  # blocks opened (a tile of theirs came) and not merged: tiles to come
        self._members: dict[int, list] = {}
        self._merged: set[int] = set()
        self._pending: dict[int, dict[int, Packed]] = {}
        self.parts: list = []  # BlockPart, or futures of them
        self._undrained: list[int] = []  # indices in `parts` whose objects `drain` has not handed over
        self.single = self._near.single
        self.early = (EarlyLinks(self.frames, self._neighbours, iou_min, ios_min) if early and self._near.n
                      else None)
        self._tags: dict[int, tuple[int, int]] = {}  # index in `parts` -> (level, block or group) it merged
        self.levels = (Levels(blocks, frames.grid, self.reach, submit, self._frames_of, self._started, iou_min,
                              ios_min) if grid and submit is not None and on_block is not None and blocks.block > 0
                       and not self.single else None)

    def _started(self, key: tuple[int, int], part) -> None:
        """A level's group merge (a future or its part) to drain like a block's."""
        self.parts.append(part)
        self._undrained.append(len(self.parts) - 1)
        self._tags[len(self.parts) - 1] = key

    def _frames_of(self, tiles) -> Mapping[int, TileFrame]:
        """The frames of `tiles`, to hand to a task: a `FrameView` (made where used) of lazy frames."""
        view = getattr(self.frames, "view", None)
        return view(tiles) if view is not None else {int(t): self.frames[int(t)] for t in tiles}

    def _neighbours(self, tile: int) -> np.ndarray:
        """The grid tiles whose windows lie within the merge's reach of `tile`'s."""
        return self._near.near(int(tile), self.frames[int(tile)].window)

    def _open(self, b: int) -> set | None:
        """Block `b`'s tiles still to come (opened when first asked), None when it was merged."""
        waiting = self._waiting.get(b)
        if waiting is None and b not in self._merged:
            self._members[b] = mine = self._near.members(b)
            waiting = self._waiting[b] = set(mine)
        return waiting

    def expect(self, tile_index: int, frame: TileFrame, block: int) -> None:
        """Register a tile that appears while the run goes (a refined tile's sub-tile), or replace a tile's
        frame, before its pieces are added: its block waits for it. Its window must lie within the windows
        given at construction (a sub-tile lies within its parent's): other blocks are found by those."""
        t = int(tile_index)
        if (block in self._merged or not self._near.has(block) or (t in self.blocks and self.blocks[t] != block)):
            raise ValueError(f"tile {t}: block {block} was merged already, or the tile is in another block")
        waiting = self._open(block)
        if t not in self.blocks:
            self.blocks[t] = block
            self._members[block].append(t)
            waiting.add(t)
        self.frames[t] = frame
        if self.early is not None:
            self.early.exclude(t)

    def add(self, tile_index: int, pieces: "Pieces | Packed | None") -> None:
        """A finished tile's pieces (its tile keys say which tile); merges its block when it is complete."""
        b = self.blocks[int(tile_index)]
        if pieces is not None and len(pieces):
            self._pending.setdefault(b, {})[int(tile_index)] = (pieces if isinstance(pieces, Packed)
                                                                else Packed.of(pieces))
            if self.early is not None and b not in self._merged:
                self.early.add(int(tile_index), pieces.unpack(Pieces) if isinstance(pieces, Packed) else pieces)
        waiting = self._open(b)
        if waiting is not None:
            waiting.discard(int(tile_index))
            if not waiting:
                self._run(b)

    def _run(self, b: int) -> None:
        self._waiting.pop(b, None)
        self._merged.add(b)
        got = self._pending.pop(b, {})
        if not got:
            self._members.pop(b, None)
            if self.levels is not None:
                self.levels.put(0, b, None)
            return
        tiles = sorted(got)
        pieces = Packed.concat([got[t] for t in tiles])
        if max(len(got[t]) for t in tiles) >= ORDER_TILE:  # cannot happen within SAM 3's 200 queries a pass
            raise ValueError(f"a tile gave {max(len(got[t]) for t in tiles)} pieces; the merge orders {ORDER_TILE - 1}")
        order = np.concatenate([piece_order(np.int64(t), np.arange(len(got[t]), dtype=np.int64)) for t in tiles])
        mine = self._members.pop(b, [])
        foreign = [] if self.single else self._near.foreign(b, 2 * self.reach)
        known = self.early.take(mine) if self.early is not None else None
        frames = self._frames_of(mine)  # `TileFrames`: the frames are made where the block merges
        job = (pieces, order, frames, foreign, self.reach, self.iou_min, self.ios_min, known)
        self.parts.append(self.submit(merge_block, job) if self.submit is not None else merge_block(*job))
        self._undrained.append(len(self.parts) - 1)
        self._tags[len(self.parts) - 1] = (0, b)

    def close(self) -> None:
        """Merge the blocks still open: their missing tiles (failed ones) will never arrive (a block no tile
        of which came has no pieces: nothing to merge)."""
        for b in sorted(self._waiting):
            self._run(b)

    def drain(self, gather=None, wait: bool = False) -> int:
        """Hand the decided objects of every merged block to `on_block` (without `wait`: only blocks whose
        merge has finished) and keep only what the final pass needs. Returns the objects handed over."""
        if self.on_block is None:
            return 0
        local = [i for i in self._undrained if isinstance(self.parts[i], BlockPart)]
        ready = [i for i in self._undrained if not isinstance(self.parts[i], BlockPart)
                 and (wait or self.parts[i].done())]
        got = dict(zip(ready, gather([self.parts[i] for i in ready]) if ready else []))
        got.update({i: self.parts[i] for i in local})
        self._undrained = [i for i in self._undrained if i not in got]
        n = 0
        for i, part in sorted(got.items()):
            if len(part.first):
                self.on_block(part.objects, part.first)
                n += len(part.first)
            self.parts[i] = replace(part, objects=Packed.of(Merged([], [], [], [])), first=part.first[:0])
            tag = self._tags.pop(i, None)
            if self.levels is not None and tag is not None:  # its rest goes up a level: only its statistics stay
                self.levels.put(*tag, part)
                self.parts[i] = replace(self.parts[i], pieces=Packed.of(Pieces()), order=part.order[:0],
                                        inside=part.inside[:0], near=part.near[:0])
        self.emitted += n
        return n

    def _drain_levels(self, gather) -> None:
        """Every block's and level's merge in, level by level (a group whose members never all came starts
        once every level below it is in)."""
        def drain_all():
            while self._undrained:
                self.drain(gather, wait=True)

        drain_all()
        if self.levels is not None:
            for level in range(1, self.levels.top):
                self.levels.flush(level)
                drain_all()

    def _rest(self, parts) -> Rest:
        """The final pass's pieces: what the levels handed up, or every block's undecided pieces."""
        if self.levels is not None:
            return self.levels.take()
        rest = Rest.concat([Rest.of(p, 0) for p in parts])
        tiles = tile_of(np.asarray(rest.pieces.columns.get("tile_key", []), dtype=np.int64))
        rest.below = np.asarray([self.blocks[int(t)] for t in tiles.tolist()], dtype=np.int64)
        return rest

    def finish(self, gather=None) -> tuple[Merged, MergeStats]:
        """Close the open blocks, gather every block's part (`gather` for futures), then the final pass.
        With `on_block`, the objects go there (the returned `Merged` is empty)."""
        self.close()
        given = gather
        if self.on_block is not None:
            self._drain_levels(gather)
            gather = None
        parts = gather(self.parts) if gather is not None else self.parts
        self.parts = []
        stats = MergeStats()
        for p in parts:
            stats.add(p.stats)
        rest = self._rest(parts)  # the final pass: every piece still undecided, in tile order
        tiles = tile_of(np.asarray(rest.pieces.columns.get("tile_key", []), dtype=np.int64))
        job = (rest.pieces, self._frames_of(np.unique(tiles)), rest.order, self.iou_min, self.ios_min, rest.inside,
               rest.near, rest.below, self.early.rest() if self.early is not None else None)
        if self.remote_final and self.submit is not None and given is not None and len(rest.order):
            fin = given([self.submit(final_pass, job)])[0]  # a task: the driver does no merge of its own
        else:
            fin = final_pass(*job)
        stats.add(fin.stats)
        if self.on_block is not None:
            if len(fin.first):
                self.on_block(fin.objects, fin.first)
            self.emitted += len(fin.first)
            stats.objects = self.emitted
            return Merged([], [], [], []), stats
        firsts = np.concatenate([p.first for p in parts] + [fin.first])
        objs = []
        for k in range(len(parts)):  # one part at a time: its WKB goes as its shapely objects come
            objs.append(parts[k].objects.unpack(Merged))
            parts[k] = None
        objs.append(fin.objects.unpack(Merged))
        del parts
        rank = np.argsort(firsts, kind="stable")
        out = Merged([], [], [], [])
        for name in ("geometry", "score", "prompt", "n_tiles"):
            col = [v for o in objs for v in getattr(o, name)]
            setattr(out, name, [col[i] for i in rank.tolist()])
        stats.objects = len(out.geometry)
        return out, stats


class _TreeWindows:
    """The windows of the tiles given to a `BlockMerger` (an STRtree of them): which lie near a tile, or near
    a block's tiles in other blocks; each block's tiles."""

    def __init__(self, frames: Mapping[int, TileFrame], blocks: dict):
        self.ids = np.asarray(sorted(frames), dtype=np.int64)
        ids = self.ids.tolist()
        if isinstance(frames, TileFrames):  # only the windows are made, all at once
            self.windows, pixels = frames.windows(ids)
        else:
            self.windows = np.empty(len(ids), dtype=object)
            self.windows[:] = [frames[t].window for t in ids]
            pixels = np.asarray([frames[t].pixel for t in ids])
        self.n, self.reach = len(ids), 8 * float(pixels.max(initial=0.0))
        self.block = np.asarray([blocks[int(t)] for t in ids], dtype=np.int64)
        self.tree = shapely.STRtree(self.windows) if len(self.windows) else None
        self._members: dict[int, list] = {}
        for t, b in blocks.items():
            self._members.setdefault(b, []).append(int(t))
        self.single = len(self._members) <= 1

    def has(self, b: int) -> bool:
        return b in self._members

    def members(self, b: int) -> list:
        return list(self._members.get(b, ()))

    def near(self, tile: int, window) -> np.ndarray:
        return self.ids[self.tree.query(window, predicate="dwithin", distance=self.reach)]

    def foreign(self, b: int, distance: float) -> list:
        """The windows of tiles of other blocks within `distance` of block `b`'s tiles given at construction."""
        near = np.unique(self.tree.query(self.windows[self.block == b], predicate="dwithin", distance=distance)[1])
        return list(self.windows[near[self.block[near] != b]])


class _GridWindows:
    """`_TreeWindows` of every tile of a grid (`GridBlocks`): by index arithmetic, the windows made only
    around the tiles asked about (`tiling.frame.grid_near`): the same answers, nothing held per tile."""

    def __init__(self, grid, blocks: GridBlocks):
        self.grid, self.blocks, self.nearby = grid, blocks, GridNear(grid)
        self.n = len(grid)
        self.reach = 8 * float(grid_windows(grid, [0])[1][0])  # one pixel size for all the grid's tiles
        self.single = blocks.single()

    def has(self, b: int) -> bool:
        return self.blocks.has(b)

    def members(self, b: int) -> list:
        return self.blocks.grid_members(b).tolist()

    def near(self, tile: int, window) -> np.ndarray:
        if not 0 <= tile < self.n:  # a sub-tile (none asks: their frames change, `early` leaves them out)
            raise ValueError(f"tile {tile} is no tile of the grid")
        return self.nearby.near([tile], self.reach)

    def foreign(self, b: int, distance: float) -> list:
        near = self.nearby.near(self.blocks.grid_members(b), distance)
        return list(self.nearby.windows_of(near[self.blocks.of(near) != b]))


def merge_blocked(pieces: "Pieces | Packed", frames: Mapping[int, TileFrame], blocks: Mapping[int, int],
                  map_blocks=None, iou_min: float = IOU_MIN,
                  ios_min: float = IOS_MIN) -> tuple[Merged, MergeStats]:
    """`merge_pieces` by spatial partition (see `BlockMerger`), over pieces already gathered in tile order.
    `map_blocks(fn, list_of_argument_tuples) -> results` runs the blocks' merges (e.g. on Dask workers)."""
    packed = pieces if isinstance(pieces, Packed) else Packed.of(pieces)
    n = len(packed)
    if n == 0 or len(set(blocks.values())) <= 1:
        return merge_pieces(packed.unpack(Pieces), frames, iou_min, ios_min)
    jobs: list = []
    merger = BlockMerger(frames, blocks, submit=(lambda fn, job: jobs.append(job) or len(jobs) - 1)
                         if map_blocks is not None else None, iou_min=iou_min, ios_min=ios_min)
    tiles = tile_of(np.asarray(packed.columns["tile_key"], dtype=np.int64))
    bounds = np.flatnonzero(np.diff(tiles)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n]):
        merger.add(int(tiles[lo]), packed.take(np.arange(lo, hi)))
    for t in frames:
        merger.add(int(t), None)
    if map_blocks is None:
        return merger.finish()
    merger.close()
    results = list(map_blocks(merge_block, jobs))
    return merger.finish(gather=lambda idx: [results[i] for i in idx])
