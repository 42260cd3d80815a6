"""Objects streamed to disk as merge blocks finish, then written to the outputs in job order.

The driver never holds every object of a job: `ObjectSpool` is a SQLite file (in the work folder, or a
temporary folder) that takes each merge block's decided objects as the block finishes, in one transaction
per block, as output rows (`frames.objects_frame`: areas in the output's units, --simplify, --min-score,
--min-area and --max-area already applied). At the end, the outputs are written from it
chunk by chunk (`CHUNK_ROWS` objects at a time) in job order (input, then the merge's order: tile order
of each object's first piece), so the ids and the rows are those of a run that held everything in memory,
whatever order the blocks finished in. GeoPackage and GeoParquet (one file or a partitioned dataset)
are written a chunk at a time (`writers.vector.write_vector` takes the chunks); FlatGeobuf, GeoJSON and
COCO are built in memory from the spool (small jobs).

Every output still appears atomically at the end (temporary name, then rename); a killed run leaves only
the spool in its work folder, which the rerun starts over (its tiles come from the checkpoints).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from ..errors import OutputError, OutputExistsError, UsageError
from ..units import area_column
from ..wording import enable, opt
from .atomic import output_lock
from .formats import format_for

#: Objects per chunk written to an output (and per part of a partitioned GeoParquet dataset); bounds the
#: shapely objects held at once (~2.5 KB each) ...
CHUNK_ROWS = 20_000
#: ... and their geometries' bytes: fewer rows a chunk where outlines are long (a real model's, a large
#: object's), so writing an output holds about this much WKB at a time whatever the objects. A chunk costs
#: 7-9 x its WKB while written (rows, shapely objects, WKB again, the Arrow table): 22,500 objects of ~3 KB
#: written to a partitioned GeoParquet peaked +255 MB at 32 MB a chunk, +108 MB at 8 MB (0.75 -> 0.87 s).
CHUNK_BYTES = 8 * 2**20


def check_dataset(path: str | os.PathLike, overwrite: bool) -> Path:
    """Validate a dataset folder before any work: writable parent; an existing one only with `overwrite`,
    and only when it holds nothing but its format's parts (never delete what sam3tiles did not write)."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{opt('out', p)}/: the folder {parent} does not exist: create it first")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{opt('out', p)}/: the folder {parent} is not writable: choose another {opt('out')}")
    if p.exists():
        if not overwrite:
            raise OutputExistsError(f"{opt('out', p)}/ exists: {enable('overwrite')} to replace it, "
                                    "or choose another name")
        fmt = format_for(p)
        if not p.is_dir() or fmt is None or any(not q.name.lower().endswith(fmt.suffix) for q in p.iterdir()):
            what = fmt.driver or fmt.name if fmt is not None else "dataset"
            raise OutputError(f"{opt('out', p)}/: it holds files that are not {what} parts, so it is not a dataset "
                              "sam3tiles wrote: choose another name (nothing was deleted)")
    return p


@dataclass
class SpoolInput:
    """What the spool needs of one input to write its rows."""

    source: str  # the input as given (`readers.remote.source_name`)
    crs: object  # WKT or None
    frame: object = None  # its `units.Frame` (area units, pixel size)


class ObjectSpool:
    """Decided objects on disk, per input, with their job order; ids assigned by `finalize`.

    `add` takes one merge block's objects (`merge.Packed` of `Merged`, WKB) and their order keys; only
    the block's objects are ever in memory. An R-tree over the objects' boxes serves `query` (label
    images are burnt window by window from it).
    """

    def __init__(self, folder: str | os.PathLike | None = None):
        self.folder = folder
        self.path: Path | None = None
        self._tmpdir = None
        self._db: sqlite3.Connection | None = None
        self._lock: ExitStack | None = None  # the spool's lock while it lives (`_hold`)
        self.inputs: list[SpoolInput] = []
        self._has_um: list[bool] = []
        self._area: list[str] = []
        self._text: dict[str, int] = {}  # prompt / source / backend / model strings -> their code
        #: columns beyond the standard ones (a point layer's columns, `found`...): name -> dtype, as first added
        self._extra: dict[str, object] = {}
        self.rows = 0
        self.empty = 0  # rows without a geometry (points where nothing was found): no objects
        self._finalized = False

    @property
    def db(self) -> sqlite3.Connection:
        # created on first use, so a run that fails before any tile leaves no work folder behind
        if self._db is None:
            folder = self.folder
            if folder is None:
                remove_stale_spool_dirs(tempfile.gettempdir())
            try:
                if folder is None:
                    self._tmpdir = folder = tempfile.mkdtemp(prefix=SPOOL_DIR_PREFIX)
                Path(folder).mkdir(parents=True, exist_ok=True)
                remove_stale_spools(folder)
                self.path = Path(folder) / f"objects-{uuid.uuid4().hex[:8]}.spool.sqlite"
                self._lock = _hold(self.path)  # before the file is made: no other run's cleanup removes it
                db = sqlite3.connect(self.path, isolation_level=None)
                db.execute("PRAGMA journal_mode=OFF")  # a scratch file: a killed run starts it over
                db.execute("PRAGMA synchronous=OFF")
                db.execute("CREATE TABLE objects (id INTEGER, input INTEGER, ord INTEGER, prompt INTEGER, "
                           "score REAL, area REAL, area_px REAL, area_um2 REAL, n_tiles INTEGER, "
                           "source INTEGER, backend INTEGER, model INTEGER, wkb BLOB, extra BLOB)")
                db.execute("CREATE VIRTUAL TABLE boxes USING rtree(oid, minx, maxx, miny, maxy)")
            except (OSError, sqlite3.Error, OutputError) as e:
                if "db" in locals():
                    db.close()
                if self.path is not None:
                    self.path.unlink(missing_ok=True)
                if self._lock is not None:
                    self._lock.close()
                    self._lock = None
                if self._tmpdir is not None:  # a full $TMPDIR: the folder made for the spool goes too
                    shutil.rmtree(self._tmpdir, ignore_errors=True)
                    self._tmpdir = None
                if isinstance(e, OutputError):
                    raise  # the lock's own message: it names the spool's folder and the fix
                raise OutputError(f"cannot create the object spool in {folder or tempfile.gettempdir()} ({e}): free "
                                  f"disk space or choose another {opt('work_dir')} (or $TMPDIR)") from None
            self._db = db
        return self._db

    def begin_input(self, info: SpoolInput) -> int:
        """Register an input; returns its index for `add`."""
        self.inputs.append(info)
        f = info.frame  # `units.add_areas` gives area_um2 on slides of known pixel size
        self._has_um.append(f is not None and f.crs is None and f.pixel_size_um is not None)
        self._area.append(area_column(f))  # the unit-named area column (area_px without a CRS)
        return len(self.inputs) - 1

    def _code(self, text: str) -> int:
        return self._text.setdefault(str(text), len(self._text))

    def add(self, input_index: int, gdf: gpd.GeoDataFrame) -> int:
        """Store one block's output rows (`frames.objects_frame` with its `_order` column), in one
        transaction. Returns the rows stored."""
        if not len(gdf):
            return 0
        geoms = np.asarray(gdf.geometry.values, dtype=object)
        bounds = shapely.bounds(geoms)
        n = len(gdf)
        um = gdf["area_um2"].to_numpy(float) if "area_um2" in gdf.columns else np.full(n, np.nan)
        codes = {c: [self._code(v) for v in gdf[c]] for c in ("prompt", "source", "backend", "model")}
        rows = zip([input_index] * n, gdf["_order"].tolist(), codes["prompt"], gdf["score"].astype(float).tolist(),
                   gdf[self._area[input_index]].astype(float).tolist(), gdf["area_px"].astype(float).tolist(),
                   [None if np.isnan(v) else float(v) for v in um], gdf["n_tiles"].astype(int).tolist(),
                   codes["source"], codes["backend"], codes["model"], list(shapely.to_wkb(geoms)),
                   self._extras(gdf, input_index))
        db = self.db
        db.execute("BEGIN")
        try:
            start = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM objects").fetchone()[0] + 1
            db.executemany("INSERT INTO objects (input, ord, prompt, score, area, area_px, area_um2, n_tiles, source, "
                           "backend, model, wkb, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            ok = np.isfinite(bounds).all(axis=1)  # an empty geometry has no box
            db.executemany("INSERT INTO boxes VALUES (?, ?, ?, ?, ?)",
                           zip(np.arange(start, start + n)[ok].tolist(), bounds[ok, 0].tolist(),
                               bounds[ok, 2].tolist(), bounds[ok, 1].tolist(), bounds[ok, 3].tolist()))
            db.execute("COMMIT")
        except sqlite3.Error as e:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise OutputError(f"cannot write the object spool {self.path} ({e}): free disk space") from None
        self.rows += n
        self.empty += int(len(geoms) - np.count_nonzero(shapely.is_geometry(geoms)))
        return n

    #: The columns every row has (`outputs.COLUMNS`, the area column, geometry, the order key).
    STANDARD = frozenset(("prompt", "score", "area_px", "area_um2", "n_tiles", "source", "backend", "model",
                          "_order"))

    def _extras(self, gdf: gpd.GeoDataFrame, input_index: int) -> list:
        """Each row's other columns (a point layer's columns, `found`, ...), pickled, or None; their names and
        dtypes are kept as first seen, so every chunk read back has the same columns and dtypes."""
        import pickle

        names = [c for c in gdf.columns if c not in self.STANDARD and c != self._area[input_index]
                 and c != gdf.geometry.name]
        if not names:
            return [None] * len(gdf)
        for c in names:
            self._extra.setdefault(c, gdf[c].dtype)
        return [pickle.dumps(dict(zip(names, row)), protocol=pickle.HIGHEST_PROTOCOL)
                for row in gdf[names].itertuples(index=False, name=None)]

    def finalize(self) -> None:
        """Number the objects 1, 2, ... in job order (input, then merge order)."""
        if self._finalized:
            return
        db = self.db
        db.execute("BEGIN")
        # in SQLite, not in Python: the numbering of millions of objects costs no driver memory
        db.execute("CREATE TEMP TABLE numbering (r INTEGER PRIMARY KEY, id INTEGER)")
        db.execute("INSERT INTO numbering SELECT rowid, ROW_NUMBER() OVER (ORDER BY input, ord) FROM objects")
        db.execute("UPDATE objects SET id = numbering.id FROM numbering WHERE numbering.r = objects.rowid")
        db.execute("DROP TABLE numbering")
        db.execute("COMMIT")
        db.execute("CREATE INDEX objects_id ON objects (id)")
        self._finalized = True

    def count(self, inputs: Sequence[int] | None = None) -> int:
        if inputs is None:
            return self.rows
        return sum(self.db.execute("SELECT COUNT(*) FROM objects WHERE input = ?", (i,)).fetchone()[0]
                   for i in inputs)

    def count_multi_tile(self) -> int:
        """Objects joined from the pieces of more than one tile (they lay across tile seams)."""
        if not self.rows:
            return 0
        return int(self.db.execute("SELECT COUNT(*) FROM objects WHERE n_tiles > 1").fetchone()[0])

    def counts_by_prompt(self) -> dict[str, int]:
        """Objects per prompt label, over every input, most first."""
        if not self.rows:
            return {}
        names = {v: k for k, v in self._text.items()}
        out = {names[c]: n for c, n in self.db.execute("SELECT prompt, COUNT(*) FROM objects WHERE wkb IS NOT NULL "
                                                        "GROUP BY prompt")}
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def frames_of(self, inputs: Sequence[int]) -> dict:
        """Source file name -> `units.Frame` of `inputs` (for the writers: units, COCO images)."""
        return {self.inputs[i].source: self.inputs[i].frame for i in inputs if self.inputs[i].frame is not None}

    def crs_of(self, inputs: Sequence[int]):
        """The CRS (WKT or None) shared by `inputs`; different CRSs cannot share one output."""
        from pyproj import CRS

        crs = [self.inputs[i].crs for i in inputs]
        if any((c is None) != (crs[0] is None) or (c is not None and CRS(c) != CRS(crs[0])) for c in crs[1:]):
            raise UsageError(f"the inputs are in different CRSs, so they cannot share one output: give {opt('out')} a "
                             "folder (one output per input)")
        return crs[0] if crs else None

    def frames(self, inputs: Sequence[int], chunk: int | None = None) -> Iterator[gpd.GeoDataFrame]:
        """The objects of `inputs` in job order, `chunk` rows at a time, ids counted from 1 over `inputs`
        (one input: its own numbering; all inputs: the combined output's). Always yields at least one
        (possibly empty) frame, so an output with no objects still gets its columns."""
        self.finalize()
        crs = self.crs_of(inputs)
        um = any(self._has_um[i] for i in inputs)
        offset, last, n = None, 0, 0
        sel = ",".join(str(int(i)) for i in inputs) or "-1"
        if chunk is None:
            mean = self.db.execute(f"SELECT AVG(LENGTH(wkb)) FROM objects WHERE input IN ({sel})").fetchone()[0]
            chunk = max(1, min(CHUNK_ROWS, int(CHUNK_BYTES // max(mean or 1.0, 1.0))))
        while True:
            rows = self.db.execute(f"SELECT id, prompt, score, area, area_px, area_um2, n_tiles, source, backend, "
                                   f"model, wkb, extra FROM objects WHERE id > ? AND input IN ({sel}) "
                                   "ORDER BY id LIMIT ?",
                                   (last, chunk)).fetchall()
            if offset is None:
                offset = rows[0][0] - 1 if rows else 0
            if not rows and n:
                return
            n += 1
            done, last = not rows, rows[-1][0] if rows else last
            gdf = self._frame(rows, offset, crs, um, self._area[inputs[0]] if len(inputs) else "area_px")
            del rows  # the chunk's rows let go before the next are read: one chunk in memory at a time
            yield gdf
            del gdf
            if done:
                return

    def frames_in(self, input_index: int, box, keep, chunk: int | None = None) -> Iterator[gpd.GeoDataFrame]:
        """The objects of one input whose boxes meet `box` (minx, miny, maxx, maxy) and that `keep` (a frame
        -> a boolean mask) selects, in id order, about `chunk` rows at a time; ids as in that input's own
        numbering (a mosaic's per-file outputs: `run.pipeline`). Always yields at least one frame."""
        self.finalize()
        crs = self.crs_of([input_index])
        area = self._area[input_index]
        base = self.db.execute("SELECT MIN(id) FROM objects WHERE input = ?", (input_index,)).fetchone()[0] or 1
        minx, miny, maxx, maxy = (float(v) for v in box)
        last, empty = 0, True
        while True:
            rows = self.db.execute("SELECT o.id, o.prompt, o.score, o.area, o.area_px, o.area_um2, o.n_tiles, "
                                   "o.source, o.backend, o.model, o.wkb, o.extra FROM boxes b JOIN objects o "
                                   "ON o.rowid = b.oid WHERE b.minx <= ? AND b.maxx >= ? AND b.miny <= ? "
                                   "AND b.maxy >= ? AND o.input = ? AND o.id > ? ORDER BY o.id LIMIT ?",
                                   (maxx, minx, maxy, miny, input_index, last, chunk or CHUNK_ROWS)).fetchall()
            if not rows:
                if empty:
                    yield self._frame([], 0, crs, self._has_um[input_index], area)
                return
            last = rows[-1][0]
            gdf = self._frame(rows, base - 1, crs, self._has_um[input_index], area)
            gdf = gdf[np.asarray(keep(gdf), dtype=bool)].reset_index(drop=True)
            if len(gdf):
                empty = False
                yield gdf

    def _frame(self, rows: list, offset: int, crs, um: bool, area: str) -> gpd.GeoDataFrame:
        """Rows (id, prompt, score, area, area_px, area_um2, n_tiles, source, backend, model, wkb, extra) -> the
        output's columns, in that order, then the other columns (`_extras`) (`um`: with area_um2; `area`: the
        area column's name, `units.area_column`, which is area_px itself without a CRS). It is the order of
        `frames.ordered` (the output table's definition, a layer above: tests/test_outputs.py holds the two
        equal)."""
        cols = list(zip(*rows)) if rows else [[] for _ in range(12)]
        names = {v: k for k, v in self._text.items()}

        def text(col):
            return pd.Series([names[c] for c in col], dtype=object)

        data = {"id": np.asarray(cols[0], dtype=np.int64) - offset, "prompt": text(cols[1]),
                "score": np.asarray(cols[2], dtype=np.float32), area: np.asarray(cols[3], dtype=np.float64),
                "area_px": np.asarray(cols[4], dtype=np.float64),
                "area_um2": np.asarray([np.nan if v is None else v for v in cols[5]], dtype=np.float64),
                "n_tiles": np.asarray(cols[6], dtype=np.int32), "source": text(cols[7]),
                "backend": text(cols[8]), "model": text(cols[9])}
        if not um:
            del data["area_um2"]
        data.update(self._extra_columns(cols[11]))
        df = pd.DataFrame(data)
        geoms = shapely.from_wkb(np.asarray(cols[10], dtype=object)) if rows else []
        return gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geoms, crs=crs), crs=crs)

    def _extra_columns(self, blobs) -> dict:
        """The other columns of rows read back (`_extras`), in their dtypes as first added."""
        import pickle

        if not self._extra:
            return {}
        dicts = [pickle.loads(b) if b is not None else {} for b in blobs]
        out = {}
        for name, dtype in self._extra.items():
            values = [d.get(name) for d in dicts]
            try:
                out[name] = pd.Series(values, dtype=dtype)
            except (TypeError, ValueError):  # a missing value in an integer or bool column
                out[name] = pd.Series(values, dtype=object)
        return out

    def objects(self) -> int:
        """Rows that are objects (rows without a geometry are points where nothing was found)."""
        return self.rows - self.empty

    def read(self, inputs: Sequence[int]) -> gpd.GeoDataFrame:
        """Every object of `inputs` in memory (what `segment()` returns; small jobs)."""
        frames = list(self.frames(inputs))
        if len(frames) == 1:
            return frames[0]
        return gpd.GeoDataFrame(pd.concat(frames, ignore_index=True), geometry="geometry", crs=frames[0].crs)

    def query(self, minx: float, miny: float, maxx: float, maxy: float, input_index: int = 0):
        """(geometries, ids) of the objects of one input whose boxes meet the box, in id order (ids as in
        that input's own numbering)."""
        self.finalize()
        base = self.db.execute("SELECT MIN(id) FROM objects WHERE input = ?", (input_index,)).fetchone()[0] or 1
        rows = self.db.execute("SELECT o.id, o.wkb FROM boxes b JOIN objects o ON o.rowid = b.oid "
                               "WHERE b.minx <= ? AND b.maxx >= ? AND b.miny <= ? AND b.maxy >= ? AND o.input = ? "
                               "ORDER BY o.id", (maxx, minx, maxy, miny, input_index)).fetchall()
        if not rows:
            return np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
        ids, wkb = zip(*rows)
        return shapely.from_wkb(np.asarray(wkb, dtype=object)), np.asarray(ids, dtype=np.int64) - (base - 1)

    def close(self) -> None:
        """Close and delete the spool file (and its temporary folder)."""
        if self._db is None:
            return
        try:
            self._db.close()
        finally:
            self._db = None
            self.path.unlink(missing_ok=True)
            if self._lock is not None:
                self._lock.close()
                self._lock = None
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> "ObjectSpool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _hold(path: Path) -> ExitStack:
    """The spool's lock (`writers.atomic.output_lock`, sam3tiles' one lock), held until the stack closes:
    while it is held, another run's `remove_stale_spools` leaves the spool alone."""
    held = ExitStack()
    held.enter_context(output_lock(path, f"the object spool in {path.parent}", quiet=True))
    return held


#: The folders a spool without a work folder lives in, in $TMPDIR (`tempfile.mkdtemp(prefix=...)`).
SPOOL_DIR_PREFIX = "sam3tiles-spool-"
#: An empty spool folder younger than this may be a live run's that has not made its file yet (seconds).
EMPTY_SPOOL_DIR_AGE = 600


def remove_stale_spool_dirs(tmp: str | os.PathLike) -> list[Path]:
    """Spool folders killed runs left in $TMPDIR (`segment(out=None)`): the spool files no living spool
    holds, then their folders when nothing else is in them (an empty one only when older than
    EMPTY_SPOOL_DIR_AGE). Only sam3tiles' own names are looked at."""
    import time

    gone = []
    for d in Path(tmp).glob(SPOOL_DIR_PREFIX + "*"):
        if not d.is_dir() or d.is_symlink():
            continue
        try:
            removed = remove_stale_spools(d)
            names = [p.name for p in d.iterdir()]
            old = time.time() - d.stat().st_mtime > EMPTY_SPOOL_DIR_AGE
            if not names and (removed or old):
                d.rmdir()
                gone.append(d)
        except OSError:
            continue  # another run's, or removed meanwhile
    return gone


def remove_stale_spools(folder: str | os.PathLike) -> list[Path]:
    """Spool files a killed run left in `folder` (a walltime kill leaves one per run, each about the
    output's size): those whose lock no living run holds (`_hold`) are removed, as is a lock left without
    its spool."""
    names = {q.name for q in Path(folder).glob("objects-????????.spool.sqlite")}
    names |= {q.name.removesuffix(".lock") for q in Path(folder).glob("objects-????????.spool.sqlite.lock")}
    gone = []
    for q in sorted(Path(folder) / n for n in names):
        try:
            with output_lock(q, f"the object spool {q}", quiet=True):  # a killed run's lock: taken over
                q.unlink()
                gone.append(q)
        except FileNotFoundError:
            continue  # a lock without its spool: gone with the lock
        except (OutputError, OSError):
            continue  # held: a run using this folder now
    return gone
