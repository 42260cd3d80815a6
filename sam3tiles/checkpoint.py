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

SCHEMA = 1


def tile_key(parts: dict) -> str:
    """A stable hash of the inputs that decide one tile's result (source identity, window, prompts,
    model identity, parameters)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class TileStore:
    """A SQLite table of tile results in `work_dir/tiles.sqlite`."""

    def __init__(self, work_dir: str | Path, fresh: bool = False):
        self.dir = Path(work_dir)
        if fresh and self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "tiles.sqlite"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS tiles (key TEXT PRIMARY KEY, schema INTEGER, result BLOB)")
        self.hits = 0
        self.puts = 0

    def get(self, key: str) -> TileResult | None:
        with self._lock:
            row = self._db.execute("SELECT schema, result FROM tiles WHERE key = ?", (key,)).fetchone()
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

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM tiles").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "TileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
