"""The area of interest grows while the run goes: a tile skipped as outside the area is taken back when an
object that reaches into the area crosses into it, so that object comes out whole, as in a full run.

The plan runs the tiles whose core touches the area grown by the overlap (`tiling.selection.AreaSkip`):
enough for every object up to the overlap across. A larger object (a field, a long building) can reach
further: a tile at the edge of the run region sees it cut by its window's edge, toward a skipped tile.
`Growth.arrived(tile, pieces)` looks at each finished tile's cut pieces (`complete` False) that reach
past its window into a neighbour's, and returns the skipped neighbours to run, as refinement returns
sub-tiles. A cut piece continues an object of the area when it

* intersects the area itself, or
* overlaps (same prompt) a continuing piece of a neighbouring tile: the same object seen twice in the band
  the two windows share. A neighbour's piece seen before the tile that continues it was finished waits
  (`_waiting`) until a continuing piece reaches it; pieces that will reach it later are left with the
  tile (`_seeds`) until it finishes.

Only tiles whose window is not wholly inside the area keep such pieces (inside, every piece intersects the
area): a band about a tile wide along the run region's edge, so what is held follows the area's
perimeter, not its surface. Chains follow the object across any number of tiles; a tile skipped for
another reason (no tissue, ...) is never taken back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely
from shapely import affinity
from shapely.geometry.base import BaseGeometry

from .frame import TileFrames
from .grid import TileGrid
from .selection import TileSelection

#: `shapely.buffer` draws a piece grown by d as a polygon between 0.99 d and 1.01 d of it (its arcs are
#: chords of 1/64 of a turn; its input is simplified by 1 % of d): a piece whose distance to a neighbour's
#: part lies in [TIE[0] d, TIE[1] d] is decided by the buffer, as the rule was first written.
TIE = (0.99, 1.02)


def targets_by_buffer(g: BaseGeometry, d: float, window, near: list[int], windows) -> tuple[int, ...]:
    """The rule: the neighbours (ids `near`, windows `windows`) that `g` grown by `d` overlaps outside
    `window`."""
    past = g.buffer(d).difference(window)
    return tuple(n for n, w in zip(near, windows) if past.intersects(w)) if not past.is_empty else ()


def _beyond(window, windows, pixel: float) -> np.ndarray:
    """Per neighbour window, its points outside `window`'s interior: the part past the window, and the
    window's edges inside the neighbour's window (a grown outline that leaves the window there touches it).
    The window is first drawn in by a thousandth of a pixel, so that its edges count where a neighbour's
    edge runs along them a rounding error off (a turned grid: tiles' corners are rounded apart)."""
    x0, y0, x1, y1 = window.bounds
    k = 1.0 - 1e-3 * pixel / max(x1 - x0, y1 - y0)
    return shapely.difference(windows, affinity.scale(window, k, k, origin="centroid"))


def _box_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance between bounding boxes `a` (n, 4) and `b` (m, 4), (n, m): at most that of their shapes
    (NaN for an empty shape)."""
    dx = np.maximum(0.0, np.maximum(b[None, :, 0] - a[:, None, 2], a[:, None, 0] - b[None, :, 2]))
    dy = np.maximum(0.0, np.maximum(b[None, :, 1] - a[:, None, 3], a[:, None, 1] - b[None, :, 3]))
    return np.hypot(dx, dy)


@dataclass
class _Piece:
    prompt: int
    geometry: BaseGeometry
    targets: tuple[int, ...]  # the grid tiles whose windows it reaches past its own tile's window


class Growth:
    """Which skipped tiles to take back as tiles finish (see the module). `area`: the area of interest in
    the CRS the pieces are in; `reach`: how far past a window's edge (tile pixels) a cut piece is looked
    for (the vectorizer's edge margin, plus one)."""

    def __init__(self, grid: TileGrid, frames: TileFrames, selection: TileSelection, area: BaseGeometry,
                 reach: float = 4.0):
        self.grid, self.frames, self.selection, self.area = grid, frames, selection, area
        shapely.prepare(self.area)
        self.reach = reach
        self._inside: dict[int, bool] = {}
        self._finished: set[int] = set()
        self._seeds: dict[int, list[_Piece]] = {}
        self._waiting: dict[int, list[_Piece]] = {}
        self.decided_by_buffer = 0  # pieces whose distance fell in `TIE` (the tests count them)

    def arrived(self, tile, pieces) -> list[int]:
        """The skipped grid tiles to run now that `tile` (a grid tile or a sub-tile: its grid tile's window
        counts) finished with `pieces` (`vectorize.Pieces`), in index order."""
        t = tile.row * self.grid.shape[1] + tile.col
        grown: list[int] = []
        cut = [k for k in range(len(pieces)) if not pieces.complete[k]] if pieces is not None else []
        if cut:
            seeds = self._seeds.get(t, [])
            geoms = [pieces.geometry[k] for k in cut]
            for k, g, targets in zip(cut, geoms, self._targets(tile.row, tile.col, geoms)):
                if not targets:
                    continue
                p = _Piece(int(pieces.prompt[k]), g, targets)
                if self.area.intersects(g) or any(s.prompt == p.prompt and s.geometry.intersects(g) for s in seeds):
                    self._spread(p, grown)
                elif not self._is_inside(t):
                    self._waiting.setdefault(t, []).append(p)
        if tile.index < len(self.grid):
            self._finished.add(t)
        return sorted(set(grown))

    def _targets(self, row: int, col: int, geoms: list) -> list[tuple[int, ...]]:
        """Per piece of grid tile (row, col), the neighbours whose windows it reaches past its own: those
        its outline grown by `reach` overlaps outside the window (`targets_by_buffer`, the rule).

        Growing every outline (thousands of vertices for a field) cost more than the tile's merge. A point
        outside the window's interior and less than `reach` from the piece lies in (the closure of) the grown
        outline less the window, and no farther point does: the rule asks whether the piece is nearer than
        `reach` to the neighbour's window less the window's interior (`_beyond`): a distance, bounding boxes
        first. The buffer's polygon is not the exact disc (`TIE`): a piece whose distance falls that close
        to `reach` is decided by the buffer itself, as before."""
        near = self._neighbours(row, col)
        windows, pixels = self.frames.windows([row * self.grid.shape[1] + col] + near)
        d = self.reach * float(pixels[0])
        beyond = _beyond(windows[0], windows[1:], float(pixels[0]))
        g = np.asarray(geoms, dtype=object)
        dist = np.full((len(g), len(near)), np.inf)
        i, j = np.nonzero(_box_gap(shapely.bounds(g), shapely.bounds(beyond)) < d * TIE[1])
        dist[i, j] = shapely.distance(g[i], beyond[j])
        tie = ((dist >= d * TIE[0]) & (dist <= d * TIE[1])).any(axis=1)
        self.decided_by_buffer += int(tie.sum())
        return [targets_by_buffer(g[r], d, windows[0], near, windows[1:]) if tie[r]
                else tuple(n for n, x in zip(near, dist[r].tolist()) if x < d * TIE[0]) for r in range(len(g))]

    def _spread(self, p: _Piece, grown: list[int]) -> None:
        """`p` continues an object of the area: its neighbours run, or learn of it, or their waiting pieces
        that it overlaps continue it too."""
        todo = [p]
        while todo:
            p = todo.pop()
            for n in p.targets:
                if not self.selection.runs(n):
                    if not self.selection.growable(n):
                        continue
                    self.selection.grow(n)
                    grown.append(n)
                if n not in self._finished:
                    if not self._is_inside(n):
                        self._seeds.setdefault(n, []).append(p)
                    continue
                waiting = self._waiting.get(n, [])
                hit = [q for q in waiting if q.prompt == p.prompt and q.geometry.intersects(p.geometry)]
                if hit:
                    self._waiting[n] = [q for q in waiting if q not in hit]
                    todo += hit

    def _neighbours(self, row: int, col: int) -> list[int]:
        """The grid tiles around (row, col) whose windows can overlap its window."""
        rows, cols = self.grid.shape
        return [r * cols + c for r in range(max(0, row - 1), min(rows, row + 2))
                for c in range(max(0, col - 1), min(cols, col + 2)) if (r, c) != (row, col)]

    def _is_inside(self, t: int) -> bool:
        """Whether tile `t`'s window lies wholly in the area (every piece of it intersects the area)."""
        v = self._inside.get(t)
        if v is None:
            v = self._inside[t] = bool(self.area.contains(self.frames.windows([t])[0][0]))
        return v
