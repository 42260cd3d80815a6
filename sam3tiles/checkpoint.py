"""Tile-level checkpoints: each tile's vectorized result, stored as it completes, keyed by everything
that affects it, so a rerun of the same command recomputes nothing it already has.

The store is one SQLite file (WAL journal, one transaction per tile): a process killed mid-write leaves
the last committed tiles intact and nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import sqlite3
import threading
from pathlib import Path

from .tasks import TileResult

SCHEMA = 2  # 2: one row per (tile, prompt), pieces renumbered as prompt 0


def tile_key(parts: dict) -> str:
    """A stable hash of the inputs that decide one tile's result (source identity, window, prompts,
    model identity, parameters)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


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
                if self.fresh and self.dir.exists():
                    shutil.rmtree(self.dir)
                self.dir.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("CREATE TABLE IF NOT EXISTS tiles (key TEXT PRIMARY KEY, schema INTEGER, result BLOB)")
            except (OSError, sqlite3.Error) as e:
                raise self._error(e) from None
            self._conn = db
        return self._conn

    def _error(self, e: BaseException):
        from .errors import OutputError

        what = getattr(e, "strerror", None) or str(e).strip().splitlines()[0]
        return OutputError(f"the checkpoint store {self.path} cannot be used ({what}): free disk space or fix the "
                           "folder's permissions, rerun with --fresh to start it over, or choose another --work-dir")

    def get(self, key: str) -> TileResult | None:
        with self._lock:
            try:
                row = self._db.execute("SELECT schema, result FROM tiles WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as e:
                raise self._error(e) from None
        if row is None or row[0] != SCHEMA:
            return None
        try:
            result = pickle.loads(row[1])
        except Exception:  # a result written by another version: recompute it
            return None
        self.hits += 1
        return result

    def put(self, key: str, result: TileResult) -> None:
        blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO tiles (key, schema, result) VALUES (?, ?, ?)",
                             (key, SCHEMA, blob))
        self.puts += 1

    def put_many(self, items: list[tuple[str, TileResult]]) -> None:
        """Store several results in one transaction: all of them or, if the process dies, none."""
        blobs = [(key, SCHEMA, pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)) for key, r in items]
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

    from .vectorize import Pieces

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
                      unusable_prompts=tuple(unusable),
                      saturated_prompts=tuple(i for i, part in parts if part.saturated and i is not None))
