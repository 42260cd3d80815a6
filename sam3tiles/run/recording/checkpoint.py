"""Tile-level checkpoints: each tile's vectorized result, stored as it completes, keyed by everything
that affects it, so a rerun of the same command recomputes nothing it already has.

The store is one SQLite file (WAL journal, one transaction per tile): a process killed mid-write leaves
the last committed tiles intact and nothing half-written.

Rows hold data, never code: a result is a small JSON header (flags, timings, the pieces' plain columns)
followed by the pieces' geometries as WKB (`encode_result` / `decode_result`). A row that does not decode
to exactly that (another schema, a damaged or crafted blob) is recomputed, never executed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...wording import opt

if TYPE_CHECKING:
    import numpy as np

    from ...vectorize.pieces import Pieces

SCHEMA = 5  # 2: one row per (tile, prompt), pieces renumbered as prompt 0; 3: JSON + WKB rows, no pickle;
# 4: a row carries the key it was stored under (a row moved to another key is recomputed); 5: keyed on the
# tile's place and pixels, not its grid position; a row holds the tile's interior edges (`fitted`)
MAGIC = b"S3TR"  # sam3tiles tile result
_COLUMNS = ("score", "prompt", "tile_key", "complete", "edge_dist")


@dataclass
class TileResult:
    """What a tile contributes to the merge, plus its bookkeeping. Small: polygons and numbers. The tile tasks
    return it (`tasks.tile_batch_task`); the store keeps its rows (`encode_result`)."""

    tile_index: int
    pieces: Pieces
    skipped: bool = False
    saturated: bool = False
    seconds: dict = field(default_factory=dict)
    unusable_prompts: tuple[str, ...] = ()
    saturated_prompts: tuple[int, ...] = ()  # prompt indices whose decoder pass saturated (checkpoint parts)
    exemplars: dict = field(default_factory=dict)  # pasted exemplars: pasted / dropped / clipped detections
    thumb: np.ndarray | None = None  # the quicklook's copy of the tile (`thumbs.take`): never checkpointed
    #: passes past each prompt's first ("extra") and their detections another pass had found ("folded":
    #: `vectorize.merge_passes`); like `exemplars`, not checkpointed
    passes: dict = field(default_factory=dict)
    #: the tile's interior edges when it was computed (left, top, right, bottom): a checkpointed result reused on
    #: a grid where they differ has its pieces' edge distances derived again (`checkpoint.fitted`)
    interior: tuple[bool, bool, bool, bool] | None = None


def tile_key(parts: dict) -> str:
    """A stable hash of the inputs that decide one tile's result (source identity, window, prompts,
    model identity, parameters)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def tile_place(tile) -> list:
    """Where a tile lies, for its key: its top-left counted in its own pixels from the CRS origin (the same
    number whichever grid on the lattice holds it: a map that grew west has other tile indices and offsets,
    not other places), its pixel size and axes, side, content and scale. Its neighbours are no part of it:
    a reused result is `fitted` to the tile's edges as this run's grid has them."""
    t = tile.transform
    at = [round(v / d, 3) if d else v for v, d in ((t.c, t.a), (t.f, t.e))]  # (a rotated grid: in CRS units)
    return [*at, t.a, t.b, t.d, t.e, tile.size, list(tile.valid_wh), list(tile.scale_xy)]


def pixels_identity(path, identity: str, member_ids, window) -> str:
    """The identity of the pixels a source-pixel window reads, for its key: `identity` for a plain input; for a
    mosaic, the members the window touches, each with its identity and its place in the CRS (not in the
    mosaic, whose origin moves when files are added west or north), and nothing of the others."""
    from ...readers.mosaic import layout_of

    lay = layout_of(path)
    if lay is None or not member_ids:
        return identity
    a, _, c, _, e, f = lay.transform[:6]
    h = hashlib.sha256(f"mosaic|{a},{e}|{lay.bands}|{lay.band_count}|{lay.dtype}|{lay.crs}".encode())
    for k in lay.touching(window):
        m = lay.members[k]
        at = (round((c + m.col * a) / a, 3), round((f + m.row * e) / e, 3))
        h.update(f"|{at}:{dataclasses.replace(m, col=0, row=0)!r}:{member_ids[k]}".encode())
    return h.hexdigest()[:16]


def fitted(result: TileResult, tile, edge_margin: int) -> TileResult:
    """A stored result as `tile` of this run's grid gives it: its pieces keyed by the tile's index, and where the
    tile's interior edges differ from those it was computed with (a map grown past its edge), each piece's
    distance to them and its completeness derived again from its outline (an exemplar's cut stays cut)."""
    from dataclasses import replace

    from ...tiling.piecekey import pass_of, piece_key
    from ...vectorize.pieces import Pieces

    p = result.pieces
    keys = [piece_key(tile.index, pass_of(k)) for k in p.tile_key]
    before = result.interior
    if before is None or tuple(before) == tuple(tile.interior) or not len(p):
        return replace(result, tile_index=tile.index, interior=tuple(tile.interior),
                       pieces=replace(p, tile_key=keys))
    dist, complete = [], []
    for g, d in zip(p.geometry, p.edge_dist):
        sides = _sides(g, tile)
        was = min((s for s, i in zip(sides, before) if i), default=math.inf)
        cut = d == 0.0 and was > 0.0  # zero without touching an interior edge: an exemplar's cut
        now = 0.0 if cut else float(min((s for s, i in zip(sides, tile.interior) if i), default=math.inf))
        dist.append(now)
        complete.append(now >= edge_margin and not cut)
    pieces = Pieces(geometry=list(p.geometry), score=list(p.score), prompt=list(p.prompt), tile_key=keys,
                    complete=complete, edge_dist=dist)
    return replace(result, tile_index=tile.index, interior=tuple(tile.interior), pieces=pieces)


def _sides(geom, tile) -> tuple[float, float, float, float]:
    """A piece's distance to its tile's left, top, right and bottom edges of content (tile pixels), as
    `vectorize.pieces_from_crops` measures them: its outline lies on whole tile pixels."""
    import shapely

    inv = ~tile.transform
    x0, y0, x1, y1 = shapely.bounds(geom)
    xs, ys = zip(*(inv @ (x, y) for x in (x0, x1) for y in (y0, y1)))
    vw, vh = tile.valid_wh
    return (float(round(min(xs))), float(round(min(ys))), float(vw - round(max(xs))), float(vh - round(max(ys))))


class TileStore:
    """A SQLite table of tile results in `work_dir/tiles.sqlite`."""

    def __init__(self, work_dir: str | Path, fresh: bool = False):
        self.dir = Path(work_dir)
        self.path = self.dir / "tiles.sqlite"
        self.fresh = fresh
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.hits = 0
        self.puts = 0

    @property
    def _db(self) -> sqlite3.Connection:
        # opened on first use, so a run that fails before any tile leaves no work folder behind
        if self._conn is None:
            try:
                from .workfolder import claim_work_dir, clear_work_dir

                if self.fresh:
                    clear_work_dir(self.dir)  # only a marked folder, only the files sam3tiles wrote
                created = not self.dir.exists()
                claim_work_dir(self.dir)
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("CREATE TABLE IF NOT EXISTS tiles (key TEXT PRIMARY KEY, schema INTEGER, result BLOB)")
            except (OSError, sqlite3.Error) as e:
                if "created" in locals() and created:  # a folder this run made and could not use: leave nothing
                    try:
                        clear_work_dir(self.dir)
                    except Exception:  # noqa: BLE001 - the store's own error is the one to report
                        pass
                raise self._error(e) from None
            self._conn = db
        return self._conn

    def _error(self, e: BaseException):
        from ...errors import OutputError

        what = getattr(e, "strerror", None) or str(e).strip().splitlines()[0]
        return OutputError(f"the checkpoint store {self.path} cannot be used ({what}): free disk space or fix the "
                           f"folder's permissions, rerun with {opt('fresh')} to start it over, or choose another "
                           f"{opt('work_dir')}")

    def get(self, key: str) -> TileResult | None:
        with self._lock:
            try:
                row = self._db.execute("SELECT schema, result FROM tiles WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as e:
                raise self._error(e) from None
        if row is None or row[0] != SCHEMA:
            return None
        result = decode_result(row[1], key)
        if result is None:  # damaged, crafted, moved or another version's row: recompute it
            return None
        self.hits += 1
        return result

    def put(self, key: str, result: TileResult) -> None:
        blob = encode_result(result, key)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO tiles (key, schema, result) VALUES (?, ?, ?)",
                             (key, SCHEMA, blob))
        self.puts += 1

    def put_many(self, items: list[tuple[str, TileResult]]) -> None:
        """Store several results in one transaction: all of them or, if the process dies, none."""
        self.put_encoded([(key, encode_result(r, key)) for key, r in items])

    def put_encoded(self, items: list[tuple[str, bytes]]) -> None:
        """`put_many` of rows already encoded (`encode_result`): what a batch of writes holds, so a row
        is fixed when it is queued and nothing done to the result afterwards can reach it."""
        blobs = [(key, SCHEMA, blob) for key, blob in items]
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                db.executemany("INSERT OR REPLACE INTO tiles (key, schema, result) VALUES (?, ?, ?)", blobs)
                db.execute("COMMIT")
            except BaseException as e:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise self._error(e) from None
                raise
        self.puts += len(blobs)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM tiles").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "TileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the row format: data, not code ------------------------------------------------------------------------

def _plain(v):
    """numpy scalars -> Python numbers (JSON)."""
    return v.item() if hasattr(v, "item") else v



def stored_rows(db: str | Path) -> int | None:
    """Rows in the checkpoint store at `db` as another process sees them now (read-only, never waits more
    than a second on the writer's lock); None when there is no readable store (yet). For progress lines
    and tests that watch a running job."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT COUNT(*) FROM tiles").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None

def encode_result(result: TileResult, key: str | None) -> bytes:
    """MAGIC, the header length (uint32 LE), the JSON header, then each geometry's WKB back to back.
    `key`: the store key the row is written under (tile, pass, prompt, ...), kept in the header so a row
    found under another key is never taken for that key's result (required: every writer states it)."""
    import shapely

    p = result.pieces
    wkbs = [shapely.to_wkb(g) for g in p.geometry]
    header = {"schema": SCHEMA, "key": key, "tile_index": int(result.tile_index), "skipped": bool(result.skipped),
              "saturated": bool(result.saturated), "seconds": {str(k): float(v) for k, v in result.seconds.items()},
              "unusable_prompts": [str(u) for u in result.unusable_prompts],
              "saturated_prompts": [int(i) for i in result.saturated_prompts],
              "interior": None if result.interior is None else [bool(i) for i in result.interior],
              "wkb_len": [len(w) for w in wkbs]}
    for name in _COLUMNS:
        header[name] = [_plain(v) for v in getattr(p, name)]
    head = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + b"".join(wkbs)


def _numbers(values, kind) -> bool:
    return isinstance(values, list) and all(isinstance(v, kind) and not isinstance(v, bool) or
                                            (kind is bool and isinstance(v, bool)) for v in values)


def decode_result(blob, key: str | None = None) -> TileResult | None:
    """The TileResult `encode_result` wrote, or None for anything else (never raises, never runs code);
    with `key`, also None for a row stored under another key (swapped or copied between tiles)."""
    import shapely

    from ...vectorize.pieces import Pieces

    try:
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            return None
        blob = bytes(blob)
        if blob[:4] != MAGIC or len(blob) < 8:
            return None
        (n,) = struct.unpack("<I", blob[4:8])
        h = json.loads(blob[8:8 + n].decode())
        if not isinstance(h, dict) or h.get("schema") != SCHEMA or (key is not None and h.get("key") != key):
            return None
        lens = h["wkb_len"]
        cols = {name: h[name] for name in _COLUMNS}
        if not (_numbers(lens, int) and all(x > 0 for x in lens) and _numbers(cols["score"], (int, float))
                and _numbers(cols["prompt"], int) and _numbers(cols["tile_key"], int)
                and _numbers(cols["complete"], bool) and _numbers(cols["edge_dist"], (int, float))
                and all(len(c) == len(lens) for c in cols.values()) and 8 + n + sum(lens) == len(blob)):
            return None
        if any(isinstance(x, float) and math.isnan(x) for x in cols["score"]):
            return None
        geoms, at = [], 8 + n
        for k in lens:
            geoms.append(shapely.from_wkb(blob[at:at + k]))
            at += k
        if any(g is None or g.geom_type not in ("Polygon", "MultiPolygon") for g in geoms):
            return None
        flags = (h["skipped"], h["saturated"])
        if not all(isinstance(f, bool) for f in flags) or not isinstance(h["tile_index"], int):
            return None
        seconds = h["seconds"]
        if not isinstance(seconds, dict) or not all(isinstance(v, (int, float)) for v in seconds.values()):
            return None
        if not _numbers(h["saturated_prompts"], int) or not all(isinstance(u, str) for u in h["unusable_prompts"]):
            return None
        interior = h["interior"]
        if interior is not None and not (_numbers(interior, bool) and len(interior) == 4):
            return None
        pieces = Pieces(geometry=geoms, **{k: list(v) for k, v in cols.items()})
        return TileResult(h["tile_index"], pieces, skipped=flags[0], saturated=flags[1], seconds=dict(seconds),
                          unusable_prompts=tuple(h["unusable_prompts"]),
                          saturated_prompts=tuple(h["saturated_prompts"]),
                          interior=None if interior is None else tuple(interior))
    except Exception:  # noqa: BLE001 - any malformed row is simply recomputed
        return None


# -- one stored result per (tile, prompt) ----------------------------------------------------------------
# A tile's result is stored once per prompt, so a changed or added prompt recomputes only what it affects:
# the other prompts' results of that tile are reused (the tile is encoded again for the new prompt only).

def prompt_part(result: TileResult, prompt_index: int | None, text: str | None = None) -> TileResult:
    """The share of `result` that prompt `prompt_index` produced, renumbered as prompt 0 (what is stored
    under that prompt's key). None: the whole result (a tile that had no prompt to run)."""
    if prompt_index is None:
        return result
    from dataclasses import fields, replace

    p = result.pieces
    idx = [i for i, v in enumerate(p.prompt) if v == prompt_index]
    cols = {f.name: [getattr(p, f.name)[i] for i in idx] for f in fields(p)}
    cols["prompt"] = [0] * len(idx)
    saturated = getattr(result, "saturated_prompts", None)
    return replace(result, pieces=type(p)(**cols),
                   saturated=(prompt_index in saturated) if saturated is not None else result.saturated,
                   unusable_prompts=tuple(u for u in result.unusable_prompts if u == text),
                   seconds={})


def join_parts(tile_index: int, parts: list[tuple[int | None, TileResult]]) -> TileResult:
    """One tile's result from its per-prompt parts [(prompt index, part renumbered as 0)], in prompt order,
    so the pieces come in the order an uninterrupted run produces them."""
    from dataclasses import fields

    from ...vectorize.pieces import Pieces

    pieces = Pieces()
    skipped, saturated, unusable, seconds = True, False, [], {}
    for index, part in parts:
        p = part.pieces
        for f in fields(p):
            col = getattr(p, f.name)
            getattr(pieces, f.name).extend([index] * len(col) if f.name == "prompt" and index is not None else col)
        skipped &= part.skipped
        saturated |= part.saturated
        unusable += [u for u in part.unusable_prompts if u not in unusable]
        for k, v in part.seconds.items():
            seconds[k] = seconds.get(k, 0.0) + v
    return TileResult(tile_index, pieces, skipped=skipped and bool(parts), saturated=saturated, seconds=seconds,
                      unusable_prompts=tuple(unusable), interior=parts[0][1].interior if parts else None,
                      saturated_prompts=tuple(i for i, part in parts if part.saturated and i is not None))


class _BatchedPuts:
    """Checkpoint writes in batches (one SQLite transaction per `BATCH` tiles or `SECONDS`), not one per
    tile: at 10^5 tiles the per-transaction cost dominates the driver. `flush` runs when the tiles end,
    also on an error or SIGTERM; a SIGKILL loses at most one batch, which the rerun recomputes."""

    BATCH = 64
    SECONDS = 0.5

    def __init__(self, store: TileStore | None):
        self.store, self.items, self.tiles, self.due = store, [], 0, time.monotonic() + self.SECONDS

    def add(self, items: list) -> None:
        """Queue [(key, TileResult)]: each row is encoded now, not at the flush, so the batch shares no
        mutable state with the results it was given (delivery hands their pieces on and drops them)."""
        if self.store is not None:
            self.items += [(k, encode_result(r, k)) for k, r in items]
        self.tiles += 1
        if self.tiles >= self.BATCH or time.monotonic() > self.due:
            self.flush()

    def flush(self) -> None:
        if self.store is not None and self.items:
            self.store.put_encoded(self.items)
        self.items, self.tiles, self.due = [], 0, time.monotonic() + self.SECONDS
