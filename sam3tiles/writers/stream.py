"""Objects streamed to disk as merge blocks finish, then written to the outputs in job order.

The driver never holds every object of a job: `ObjectSpool` is a SQLite file (in the work folder, or a
temporary folder) that takes each merge block's decided objects as the block finishes, in one transaction
per block, with --simplify and --min-area already applied. At the end, the outputs are written from it
chunk by chunk (`CHUNK_ROWS` objects at a time) in job order (input, then the merge's order: tile order
of each object's first piece), so the ids and the rows are those of a run that held everything in memory,
whatever order the blocks finished in. GeoPackage and GeoParquet (one file or a partitioned dataset)
are written a chunk at a time; FlatGeobuf and GeoJSON are built in memory from the spool (small jobs).

Every output still appears atomically at the end (temporary name, then rename); a killed run leaves only
the spool in its work folder, which the rerun starts over (its tiles come from the checkpoints).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sqlite3
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from ..errors import OutputError, OutputExistsError, UsageError

#: Objects per chunk written to an output (and per part of a partitioned GeoParquet dataset); bounds the
#: shapely objects held at once (~2.5 KB each).
CHUNK_ROWS = 20_000
#: Output names that ask for a partitioned GeoParquet dataset (a folder of parts): `objects.parquet/`.
DATASET_SUFFIXES = (".parquet", ".geoparquet")
COLUMNS = ["id", "prompt", "score", "area", "area_px", "n_tiles", "source", "backend", "model"]


def is_dataset(out: str | os.PathLike | None) -> bool:
    """Whether `out` names a partitioned GeoParquet dataset: a name ending in `.parquet/` (or an existing
    folder named `*.parquet`)."""
    if out is None:
        return False
    s = os.fspath(out)
    p = Path(s)
    return p.suffix.lower() in DATASET_SUFFIXES and (s.endswith(("/", os.sep)) or p.is_dir())


def check_dataset(path: str | os.PathLike, overwrite: bool) -> Path:
    """Validate a dataset folder before any work: writable parent; an existing one only with `overwrite`,
    and only when it holds nothing but Parquet parts (never delete what sam3tiles did not write)."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"--out {p}/: the folder {parent} does not exist: create it first")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"--out {p}/: the folder {parent} is not writable: choose another --out")
    if p.exists():
        if not overwrite:
            raise OutputExistsError(f"--out {p}/ exists: pass --overwrite to replace it, or choose another name")
        if not p.is_dir() or any(not q.name.endswith(".parquet") for q in p.iterdir()):
            raise OutputError(f"--out {p}/: it holds files that are not Parquet parts, so it is not a dataset "
                              "sam3tiles wrote: choose another name (nothing was deleted)")
    return p


@dataclass
class SpoolInput:
    """What the spool needs of one input to write its rows."""

    source: str  # the `source` column: the input's file name
    crs: object  # WKT or None
    labels: list  # prompt index -> prompt label
    backend: str
    model: str


class ObjectSpool:
    """Decided objects on disk, per input, with their job order; ids assigned by `finalize`.

    `add` takes one merge block's objects (`merge.Packed` of `Merged`, WKB) and their order keys; only
    the block's objects are ever in memory. An R-tree over the objects' boxes serves `query` (label
    images are burnt window by window from it).
    """

    def __init__(self, folder: str | os.PathLike | None = None, simplify: float = 0.0, min_area: float = 0.0):
        self.folder = folder
        self.path: Path | None = None
        self._tmpdir = None
        self._db: sqlite3.Connection | None = None
        self.simplify, self.min_area = simplify, min_area
        self.inputs: list[SpoolInput] = []
        self._pixel_area: list[float] = []
        self.rows = 0
        self._finalized = False

    @property
    def db(self) -> sqlite3.Connection:
        # created on first use, so a run that fails before any tile leaves no work folder behind
        if self._db is None:
            folder = self.folder
            if folder is None:
                self._tmpdir = folder = tempfile.mkdtemp(prefix="sam3tiles-spool-")
            try:
                Path(folder).mkdir(parents=True, exist_ok=True)
                self.path = Path(folder) / f"objects-{uuid.uuid4().hex[:8]}.spool.sqlite"
                db = sqlite3.connect(self.path, isolation_level=None)
                db.execute("PRAGMA journal_mode=OFF")  # a scratch file: a killed run starts it over
                db.execute("PRAGMA synchronous=OFF")
                db.execute("CREATE TABLE objects (id INTEGER, input INTEGER, ord INTEGER, prompt INTEGER, "
                           "score REAL, n_tiles INTEGER, area REAL, area_px REAL, wkb BLOB)")
                db.execute("CREATE VIRTUAL TABLE boxes USING rtree(oid, minx, maxx, miny, maxy)")
            except (OSError, sqlite3.Error) as e:
                raise OutputError(f"cannot create the object spool in {folder} ({e}): free disk space or choose "
                                  "another --work-dir") from None
            self._db = db
        return self._db

    def begin_input(self, info: SpoolInput, pixel_area: float) -> int:
        """Register an input; returns its index for `add`."""
        self.inputs.append(info)
        self._pixel_area.append(pixel_area)
        return len(self.inputs) - 1

    def add(self, input_index: int, objects, first: np.ndarray) -> int:
        """Store one block's decided objects (one transaction); --simplify and --min-area are applied here.
        Returns the objects kept."""
        geoms = shapely.from_wkb(objects.wkb) if len(objects) else np.zeros(0, dtype=object)
        if self.simplify > 0 and len(geoms):
            geoms = shapely.simplify(geoms, self.simplify, preserve_topology=True)
        area = shapely.area(geoms)
        keep = area >= self.min_area if self.min_area > 0 else np.ones(len(geoms), bool)
        idx = np.flatnonzero(keep)
        if not len(idx):
            return 0
        cols = objects.columns
        wkb = shapely.to_wkb(geoms[idx]) if self.simplify > 0 else objects.wkb[idx]
        bounds = shapely.bounds(geoms[idx])
        px = self._pixel_area[input_index]
        rows = zip([input_index] * len(idx), np.asarray(first)[idx].tolist(),
                   np.asarray(cols["prompt"])[idx].tolist(), np.asarray(cols["score"], float)[idx].tolist(),
                   np.asarray(cols["n_tiles"])[idx].tolist(), area[idx].tolist(), (area[idx] / px).tolist(),
                   list(wkb))
        db = self.db
        db.execute("BEGIN")
        try:
            start = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM objects").fetchone()[0] + 1
            db.executemany("INSERT INTO objects (input, ord, prompt, score, n_tiles, area, area_px, wkb) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            ok = np.isfinite(bounds).all(axis=1)  # an empty geometry has no box
            db.executemany("INSERT INTO boxes VALUES (?, ?, ?, ?, ?)",
                           zip(np.arange(start, start + len(idx))[ok].tolist(), bounds[ok, 0].tolist(),
                               bounds[ok, 2].tolist(), bounds[ok, 1].tolist(), bounds[ok, 3].tolist()))
            db.execute("COMMIT")
        except sqlite3.Error as e:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise OutputError(f"cannot write the object spool {self.path} ({e}): free disk space") from None
        self.rows += len(idx)
        return len(idx)

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

    def counts_by_prompt(self) -> dict[str, int]:
        """Objects per prompt label, over every input."""
        out: dict[str, int] = {}
        for i, info in enumerate(self.inputs):
            for prompt, n in self.db.execute("SELECT prompt, COUNT(*) FROM objects WHERE input = ? GROUP BY prompt",
                                             (i,)):
                label = str(info.labels[prompt])
                out[label] = out.get(label, 0) + n
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def crs_of(self, inputs: Sequence[int]):
        """The CRS (WKT or None) shared by `inputs`; different CRSs cannot share one output."""
        from pyproj import CRS

        crs = [self.inputs[i].crs for i in inputs]
        if any((c is None) != (crs[0] is None) or (c is not None and CRS(c) != CRS(crs[0])) for c in crs[1:]):
            raise UsageError("the inputs are in different CRSs, so they cannot share one output: give --out a "
                             "folder (one output per input)")
        return crs[0] if crs else None

    def frames(self, inputs: Sequence[int], chunk: int | None = None) -> Iterator[gpd.GeoDataFrame]:
        """The objects of `inputs` in job order, `chunk` rows at a time, ids counted from 1 over `inputs`
        (one input: its own numbering; all inputs: the combined output's). Always yields at least one
        (possibly empty) frame, so an output with no objects still gets its columns."""
        self.finalize()
        crs = self.crs_of(inputs)
        chunk = chunk or CHUNK_ROWS
        offset, last, n = None, 0, 0
        sel = ",".join(str(int(i)) for i in inputs) or "-1"
        while True:
            rows = self.db.execute(f"SELECT id, input, prompt, score, area, area_px, n_tiles, wkb FROM objects "
                                   f"WHERE id > ? AND input IN ({sel}) ORDER BY id LIMIT ?", (last, chunk)).fetchall()
            if offset is None:
                offset = rows[0][0] - 1 if rows else 0
            if not rows and n:
                return
            n += 1
            yield self._frame(rows, offset, crs)
            if not rows:
                return
            last = rows[-1][0]

    def _frame(self, rows: list, offset: int, crs) -> gpd.GeoDataFrame:
        cols = list(zip(*rows)) if rows else [[] for _ in range(8)]
        ids, inp, prompt, score, area, area_px, n_tiles, wkb = cols
        info = [self.inputs[i] for i in inp]
        geoms = shapely.from_wkb(np.asarray(wkb, dtype=object)) if rows else []
        df = pd.DataFrame({
            "id": np.asarray(ids, dtype=np.int64) - offset,
            "prompt": pd.Series([str(x.labels[p]) for x, p in zip(info, prompt)], dtype=object),
            "score": np.asarray(score, dtype=np.float32),
            "area": np.asarray(area, dtype=np.float64),
            "area_px": np.asarray(area_px, dtype=np.float64),
            "n_tiles": np.asarray(n_tiles, dtype=np.int32),
            "source": pd.Series([x.source for x in info], dtype=object),
            "backend": pd.Series([x.backend for x in info], dtype=object),
            "model": pd.Series([x.model for x in info], dtype=object),
        })
        return gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geoms, crs=crs), crs=crs)

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
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> "ObjectSpool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- writing outputs from the spool --------------------------------------------------------------------------

def write_streamed(frames: Iterator[gpd.GeoDataFrame], path: str | os.PathLike, metadata: dict | None = None,
                   layer: str = "objects", dataset: bool = False) -> Path:
    """Write `frames` (chunks of one output, in order) to `path` by format, atomically: GeoPackage and
    GeoParquet a chunk at a time, a GeoParquet dataset (`dataset`) one part per chunk, other formats in
    memory through `write_vector`."""
    from .atomic import DRIVERS, atomic_path
    from .vector import write_vector

    p = Path(path)
    if dataset:
        return _write_dataset(frames, p, metadata)
    driver = DRIVERS[p.suffix.lower()]
    if driver == "GPKG":
        with atomic_path(p) as tmp:
            for k, frame in enumerate(frames):
                if k == 0:
                    write_vector(frame, tmp, layer=layer, metadata=metadata)
                elif len(frame):
                    with warnings.catch_warnings():
                        warnings.filterwarnings("ignore", message=".*crs.*was not provided", category=UserWarning)
                        frame.to_file(tmp, driver="GPKG", layer=layer, engine="pyogrio", mode="a")
        return p
    if driver == "Parquet":
        for stale in p.parent.glob(f".{glob.escape(p.stem)}.parts.*"):  # left by a killed run (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        with atomic_path(p) as tmp, tempfile.TemporaryDirectory(prefix=f".{p.stem}.parts.", dir=p.parent) as d:
            parts = [_write_part(frame, Path(d) / f"part-{k:05d}.parquet", metadata) for k, frame in enumerate(frames)]
            _concat_parts(parts, tmp)
        return p
    frames = list(frames)
    gdf = frames[0] if len(frames) == 1 else gpd.GeoDataFrame(pd.concat(frames, ignore_index=True),
                                                              geometry="geometry", crs=frames[0].crs)
    return write_vector(gdf, p, metadata=metadata)


def _write_part(frame: gpd.GeoDataFrame, path: Path, metadata: dict | None) -> Path:
    """One GeoParquet part (GeoParquet 1.1 with a covering `bbox` column, so readers skip row groups by
    extent); no CRS is written as `"crs": null` (unknown), never as WGS84."""
    from .vector import _patch_parquet

    frame.to_parquet(path, index=False, schema_version="1.1.0", write_covering_bbox=True)
    _patch_parquet(path, {"sam3tiles": json.dumps(metadata or {})}, no_crs=frame.crs is None)
    return path


def _concat_parts(parts: list[Path], dest: Path) -> None:
    """Parts -> one GeoParquet file, one part (row group) in memory at a time; the `geo` metadata's bbox
    and geometry types cover every part."""
    import pyarrow.parquet as pq

    metas = [json.loads(pq.read_schema(q).metadata[b"geo"]) for q in parts]
    geo = metas[0]
    for name, col in geo["columns"].items():
        boxes = [m["columns"][name].get("bbox") for m in metas if m["columns"][name].get("bbox")]
        if boxes:
            b = np.asarray(boxes, dtype=float)
            col["bbox"] = [b[:, 0].min(), b[:, 1].min(), b[:, 2].max(), b[:, 3].max()]
        col["geometry_types"] = sorted({t for m in metas for t in m["columns"][name].get("geometry_types", [])})
    schema = pq.read_schema(parts[0])
    meta = dict(schema.metadata)
    meta[b"geo"] = json.dumps(geo).encode()
    schema = schema.with_metadata(meta)
    with pq.ParquetWriter(dest, schema) as w:
        for q in parts:
            w.write_table(pq.read_table(q).replace_schema_metadata(meta))


def _write_dataset(frames: Iterator[gpd.GeoDataFrame], p: Path, metadata: dict | None) -> Path:
    """A folder of GeoParquet parts (`part-00000.parquet`, ...), written under a temporary name and renamed
    into place; an existing dataset (checked by `check_dataset`) is replaced only once the new one is whole."""
    tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
    for stale in p.parent.glob(f".{glob.escape(p.name)}.????????.tmp"):  # left by a killed run (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir()
    try:
        for k, frame in enumerate(frames):
            if k == 0 or len(frame):
                _write_part(frame, tmp / f"part-{k:05d}.parquet", metadata)
        old = None
        if p.exists():
            old = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.tmp")
            os.replace(p, old)
        os.replace(tmp, p)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return p
