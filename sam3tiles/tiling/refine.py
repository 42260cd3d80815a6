"""Adaptive zoom for dense scenes: a tile whose answer hits SAM 3's 200-object cap is re-run as sub-tiles
at twice the zoom, only there, only for the prompts that hit the cap, recursively up to a depth.

Why: SAM 3 returns at most 200 instances per image and prompt, so a 1008 px tile of a car park or of a
slide at 40x silently loses objects. Zooming the whole image (`--scale 2`) costs 4x everywhere; here the
extra cost follows the density.

The rules (see `Refiner`):

* *Geometry.* `TileGrid.split`: the sub-tiles' cores partition the parent's core (2x2 quadrants at twice
  the zoom); their windows keep overlap/2 sub-tile pixels of context where it fits, as on the grid. They
  are read from the source at that zoom (a slide: the pyramid level matching it).
* *Per prompt.* A sub-tile runs only the prompts its parent saturated (one encode for all of them).
* *Merge.* Sub-tiles are tiles of a finer grid inside the parent's core; for a refined prompt the
  parent's pieces are replaced by theirs, except the parent's pieces larger than half the sub-tile
  overlap (in parent pixels): those objects may be cut in every sub-tile, so the parent's copy stays and
  the merge links the sub-tiles' pieces of it to that copy (one object, the complete copy or a stitch).
  Smaller objects are whole in at least one sub-tile (sub-tile windows overlap by the overlap) or in the
  neighbouring parent tile, so the parent's coarse copy of them is dropped: never two copies of one.
  Refined tiles and their sub-tiles share every pixel with another window, so none has an exclusive area.
* *Indices.* A sub-tile's index is a pure function of its parent's index and position: checkpoints and the
  merge order are the same in every run, resumed or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import shapely

from ..errors import UsageError
from ..wording import opt
from .frame import TileFrame, TileFrames
from .grid import Tile, TileGrid
from .piecekey import MAX_INDEX

MODES = ("auto", "off")
DEFAULT_DEPTH = 2
#: Deepest refinement accepted: 4 levels is 16x the zoom (sub-tile indices stay within int64 order keys).
MAX_DEPTH = 4
#: Most sub-tiles one split makes (4x4 at most, since the overlap is under half a tile).
BRANCH = 16


@dataclass
class RefineStats:
    """What refinement did for one run (all inputs): the report's `refine` section."""

    mode: str = "auto"
    depth: int = DEFAULT_DEPTH
    refined: dict = field(default_factory=dict)  # depth of the refined tile (0: grid tile) -> tiles refined
    sub_tiles: dict = field(default_factory=dict)  # depth of the sub-tiles -> sub-tiles made
    extra_encodes: int = 0  # sub-tiles encoded in this run (resumed ones cost nothing)
    saturated_at_max_depth: int = 0  # tiles still saturated where no deeper level is allowed
    tiles: list = field(default_factory=list)  # one record per refined tile (see Refiner.refine)

    def add_to(self, d: dict) -> dict:
        """Sum this input's figures into the report's `refine` dict `d` (several inputs share one)."""
        d["mode"], d["depth"] = self.mode, self.depth
        for name in ("refined", "sub_tiles"):
            per = d.setdefault(name, {})
            for k, v in getattr(self, name).items():
                per[str(k)] = per.get(str(k), 0) + v
        for name in ("extra_encodes", "saturated_at_max_depth"):
            d[name] = d.get(name, 0) + getattr(self, name)
        d.setdefault("tiles", []).extend(self.tiles)
        return d


class Refiner:
    """Refinement of one input's grid: which tiles to split, their sub-tiles, the parent's kept pieces.

    `n_tiles`: tiles of the grid (indices 0..n-1). Sub-tile indices follow: depth d holds BRANCH**d slots per
    grid tile, so `depth_of` and `path` are arithmetic on the index.
    """

    def __init__(self, grid: TileGrid, depth: int, source: str = ""):
        self.grid, self.depth, self.source = grid, depth, source
        self.n = len(grid)
        self.offsets = [0]
        for d in range(depth + 1):
            self.offsets.append(self.offsets[-1] + self.n * BRANCH**d)
        if self.offsets[-1] > MAX_INDEX:
            raise UsageError(f"{opt('refine_depth', depth)} on a grid of {self.n} tiles needs more tile numbers than "
                             f"the merge holds: use {opt('refine_depth', max(0, depth - 1))} or a coarser "
                             f"{opt('scale')}")
        self.refined: set[int] = set()  # tiles whose sub-tiles replace them for some prompts
        self.at_max: set[int] = set()  # saturated tiles that may not be refined further

    def depth_of(self, index: int) -> int:
        d = 0
        while index >= self.offsets[d + 1]:
            d += 1
        return d

    def path(self, index: int) -> list[int]:
        """[grid tile index, position in its split, position in the next split, ...]."""
        d = self.depth_of(index)
        if d == 0:
            return [index]
        local = index - self.offsets[d]
        parent = self.offsets[d - 1] + local // BRANCH
        return self.path(parent) + [local % BRANCH]

    def children(self, tile: Tile) -> list[Tile]:
        """The sub-tiles of `tile` (any depth), with their indices."""
        d = self.depth_of(tile.index)
        first = self.offsets[d + 1] + (tile.index - self.offsets[d]) * BRANCH
        subs = self.grid.split(tile, first)
        if len(subs) > BRANCH:  # unreachable while the overlap is under half a tile (TileGrid checks it)
            raise UsageError(f"tile {tile.index} splits into {len(subs)} sub-tiles: lower {opt('overlap')}")
        return subs

    def refine(self, tile: Tile, saturated: tuple[int, ...], pieces, pixel: float, stats: RefineStats,
               labels=None) -> list[Tile]:
        """The sub-tiles to run for a finished tile whose prompts `saturated` hit the cap (none: []).

        `pieces` (the tile's Pieces, CRS) lose, for the refined prompts, every piece not larger than half
        the sub-tile overlap (`pixel`: one tile pixel in CRS units); see the module docstring. Saturated
        tiles at the maximum depth are counted in `stats` and kept whole.
        """
        if not saturated or tile.scale_xy[0] != tile.scale_xy[1]:
            return []
        d = self.depth_of(tile.index)
        if d >= self.depth:
            self.at_max.add(tile.index)
            stats.saturated_at_max_depth += 1
            return []
        subs = self.children(tile)
        self.refined.add(tile.index)
        stats.refined[d] = stats.refined.get(d, 0) + 1
        stats.sub_tiles[d + 1] = stats.sub_tiles.get(d + 1, 0) + len(subs)
        if pieces is not None:
            keep_larger_pieces(pieces, set(saturated), self.grid.overlap / 2 * pixel)
        sx = tile.transform
        core = shapely.box(*tile.core_tile_px)
        bounds = shapely.affinity.affine_transform(core, sx.to_shapely()).bounds
        stats.tiles.append({"source": self.source, "tile": tile.index, "depth": d, "path": self.path(tile.index),
                            "prompts": [labels[i] if labels else i for i in saturated],
                            "sub_tiles": len(subs), "core_bounds": [round(v, 6) for v in bounds]})
        return subs


@dataclass(frozen=True)
class Refinement:
    """What refinement decided for one finished tile; the tile loop applies it (`InputRun`).

    `sub_tiles` (in index order) run the prompts `prompts` and join the tile's merge block with
    `sub_frames`; the refined tile's own frame becomes `frame` (shared: no exclusive area). `saturated`:
    the tile hit the object cap and is left as it is (counted in the report). Empty for most tiles."""

    sub_tiles: tuple[Tile, ...] = ()
    sub_frames: tuple[TileFrame, ...] = ()  # one per sub-tile, CRS
    frame: TileFrame | None = None  # the refined tile's new frame, None when not refined
    prompts: frozenset[int] = frozenset()
    saturated: bool = False


#: The answer for a tile that is neither refined nor saturated (most tiles).
NOTHING = Refinement()


class RefineHook:
    """What a tile loop asks as each tile's result arrives (`arrived`): counts refinement's figures, and
    for a tile to refine returns its sub-tiles with their frames and the prompts they run (`Refinement`).
    The loop registers them with its merger, looks them up in the checkpoints and queues the rest at the
    front (one call, no second pass).

    `grid`: None for a squashed run (never refined); it answers the sub-tiles' frames; `prompts`: the
    run's prompts (label, text); `source`: the input's path.

    Box-only prompts are not refined: a sub-tile finds their objects only through an example in it or
    pasted into it (`--box-scope image`), and a paste may fit in no sub-tile's margin at twice the zoom,
    while the parent's pieces of the prompt would be dropped; such tiles stay counted as saturated.
    Prompts with text and boxes are refined; their sub-tiles get the example boxes like any tile.
    """

    def __init__(self, grid: TileGrid | None, mode: str, depth: int, prompts, source: str = ""):
        depth = depth if mode == "auto" else 0
        self.refiner = Refiner(grid, depth, source) if grid is not None else None
        self.frames = TileFrames(grid) if grid is not None else None
        self.prompts = prompts
        self.stats = RefineStats(mode=mode if grid is not None else "off", depth=depth)

    def depth_of(self, index: int) -> int:
        return self.refiner.depth_of(index) if self.refiner is not None else 0

    def arrived(self, tile: Tile, res, computed: bool, frame: TileFrame | None) -> Refinement:
        """The refinement of a finished tile whose merge frame is `frame` (mostly `NOTHING`; the frame is
        needed only for a tile that saturated: None for any other); call before the tile's pieces go to the
        merger (they lose, in place, what the sub-tiles replace)."""
        if computed and not res.skipped and self.depth_of(tile.index):
            self.stats.extra_encodes += 1
        # box-only prompts are not refined (see the class notes)
        todo = tuple(i for i in res.saturated_prompts if self.prompts[i].text is not None)
        subs = []
        if self.refiner is not None and todo:
            subs = self.refiner.refine(tile, todo, res.pieces, frame.pixel, self.stats,
                                       [p.label for p in self.prompts])
        if not subs or self.frames is None:
            return Refinement(saturated=True) if res.saturated else NOTHING
        return Refinement(tuple(subs), tuple(shared_frame(self.frames.frame(sub)) for sub in subs),
                          shared_frame(frame), frozenset(todo))

    def key_part(self, tile: Tile) -> dict:
        """What a sub-tile adds to its checkpoint key: its index (it is in the stored pieces)."""
        return {"sub_tile": tile.index} if self.depth_of(tile.index) else {}


def keep_larger_pieces(pieces, prompts: set, size: float) -> int:
    """Drop, in place, the pieces of `prompts` whose bounding box is at most `size` (CRS units) on both
    sides: sub-tiles see those objects whole. Returns how many were dropped."""
    if not len(pieces):
        return 0
    b = shapely.bounds(np.asarray(pieces.geometry, dtype=object))
    big = np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]) > size
    keep = [i for i, p in enumerate(pieces.prompt) if p not in prompts or big[i]]
    if len(keep) == len(pieces):
        return 0
    for name in pieces.__dataclass_fields__:
        col = getattr(pieces, name)
        setattr(pieces, name, [col[i] for i in keep])
    return len(b) - len(keep)


def shared_frame(frame):
    """A refined tile's or sub-tile's merge frame: no exclusive area (another window sees all of it)."""
    from shapely.geometry import Polygon

    return replace(frame, exclusive=Polygon())


def advice(still: int, mode: str, depth: int) -> str:
    """One line for stderr about tiles whose answer may still miss objects."""
    if mode == "off" or depth == 0:
        return (f"{still} tile(s) hit SAM 3's 200-object cap, so objects there are missing: rerun with "
                f"{opt('refine', 'auto')} (re-runs only those tiles zoomed in)")
    fix = opt("refine_depth", depth + 1) if depth < MAX_DEPTH else f"a larger {opt('scale')}"
    return (f"{still} tile(s) still hit SAM 3's 200-object cap at {opt('refine_depth', depth)}, so objects there "
            f"may be missing: rerun with {fix}")
