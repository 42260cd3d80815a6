"""Refinement benchmark: dense scenes where tiles hit SAM 3's 200-object cap, segmented with the reference
backend with default options (`--refine auto`), `--refine off` and `--scale 2`; recall, precision and
encoder calls of each, against the bound base tiles + 4 x saturated tiles per level.

    python benchmarks/bench_refine.py                # 3000 x 3000 scenes, seeds 0-2
    python benchmarks/bench_refine.py --smoke        # one 1300 px uniform scene (tests/test_bench_refine.py)
    python benchmarks/bench_refine.py --kinds slide --seeds 1

Scenes (demo.py style GeoTIFFs, `red` vehicles of about 10 x 20 px at any angle, one per cell of a jittered
grid, a gap of >= 8 px):

* `uniform`: dense everywhere (about 300 vehicles per 1008 px tile: every tile saturates);
* `quarter`: sparse, with one dense quarter (only the tiles over it saturate);
* `sparse`: no tile saturates (refinement must change nothing: same objects, same encoder calls);
* `slide`: a brightfield OME-TIFF pyramid whose nuclei saturate native tiles (`levels_read`: reads per
  pyramid level; at --scale 1 grid tiles and sub-tiles both read level 0, the sub-tiles zoomed 2x).

One JSON line per run, then a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from shapely import affinity
from shapely.geometry import box

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sam3tiles.evaluate import evaluate
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene

CELL = 34  # px per jittered-grid cell: a vehicle's rotated box (<= 25 px) plus the 8 px gap


def vehicles(width: int, height: int, seed: int, dense: float, sparse: float = 0.0,
             region: tuple[float, float, float, float] | None = None) -> list:
    """[('red', polygon)] in pixel coordinates: one vehicle in a `dense` share of the cells inside
    `region` (x0, y0, x1, y1 as fractions of the image; None: everywhere) and a `sparse` share elsewhere."""
    rng = np.random.default_rng(seed)
    out = []
    rx0, ry0, rx1, ry1 = region or (0, 0, 1, 1)
    for cy in range(height // CELL):
        for cx in range(width // CELL):
            x, y = (cx + 0.5) * CELL, (cy + 0.5) * CELL
            inside = rx0 * width <= x < rx1 * width and ry0 * height <= y < ry1 * height
            if rng.random() >= (dense if inside else sparse):
                continue
            w, h = rng.uniform(9, 11), rng.uniform(18, 22)
            car = affinity.rotate(box(-w / 2, -h / 2, w / 2, h / 2), rng.uniform(0, 180))
            # jitter inside the cell, keeping the 8 px gap to the cell's edge (half the gap each side)
            minx, miny, maxx, maxy = car.bounds
            jx = rng.uniform(-(CELL / 2 - 4 + minx), CELL / 2 - 4 - maxx)
            jy = rng.uniform(-(CELL / 2 - 4 + miny), CELL / 2 - 4 - maxy)
            out.append(("red", affinity.translate(car, x + jx, y + jy)))
    return out


SCENES = {
    "uniform": {"dense": 0.35},
    "quarter": {"dense": 0.35, "sparse": 0.04, "region": (0.5, 0.5, 1.0, 1.0)},
    "sparse": {"dense": 0.04},
}


def make_scene(folder: Path, kind: str, size: int, seed: int):
    """A dense scene (GeoTIFF of vehicles), or kind "slide": a brightfield OME-TIFF pyramid whose nuclei
    (`indigo`, one per 44 px cell, 60 % of the cells: about 315 per 1008 px tile) saturate native tiles."""
    if kind == "slide":
        from sam3tiles.testing.slidegen import write_slide

        return write_slide(folder / f"slide-{size}-{seed}.ome.tif", size, size, seed=seed, names=("indigo",),
                           cell=44, fill=0.6)
    objs = vehicles(size, size, seed, **SCENES[kind])
    return write_scene(folder / f"{kind}-{size}-{seed}.tif", size, size, seed, objects=objs)


class LevelSpy:
    """Counts the pyramid levels a slide's windows are read from (in-process workers only), from each
    read's `SlideSource.levels_read` (the reader's own count of window reads per level)."""

    def __enter__(self):
        from sam3tiles.readers.slide import SlideSource

        self.levels: dict[int, int] = {}
        self.cls, self.original = SlideSource, SlideSource.read_window
        spy = self

        def read_window(slide, *a):
            before = dict(slide.levels_read)
            out = spy.original(slide, *a)
            for level, n in slide.levels_read.items():
                spy.levels[level] = spy.levels.get(level, 0) + n - before.get(level, 0)
            return out

        SlideSource.read_window = read_window
        return self

    def __exit__(self, *exc):
        self.cls.read_window = self.original


def encodes(report) -> int:
    return sum(v.get(report.backend, {}).get("encodes", 0) for v in report.runtime_counters.values())


def run(scene, workers: int = 2, **opts) -> dict:
    from sam3tiles.model.registry import clear_cache

    clear_cache()  # the in-process workers' encoder counters start at 0
    t0 = time.perf_counter()
    prompt = "indigo" if str(scene.path).endswith(".ome.tif") else "red"
    with LevelSpy() as spy:
        gdf, rep = segment_job(str(scene.path), [prompt], backend="reference", checkpoint=False, workers=workers,
                               **opts)
    row = evaluate(gdf, scene.truth).iloc[0]
    ref = rep.refine
    levels = {int(k): v for k, v in ref.get("refined", {}).items()}
    base = rep.tiles - sum(ref.get("sub_tiles", {}).values())
    return {"objects": len(gdf), "truth": int(row.truth), "recall": round(float(row.recall), 4),
            "precision": round(float(row.precision), 4), "encodes": encodes(rep), "base_tiles": base,
            "bound": base + 4 * sum(levels.values()), "refined": ref.get("refined", {}),
            "extra_encodes": ref.get("extra_encodes", 0), "still_saturated": rep.saturated,
            "seconds": round(time.perf_counter() - t0, 2), "levels_read": spy.levels, "_gdf": gdf}


def bench(size: int, seeds, kinds=(*SCENES, "slide"), scale2: bool = True, folder: Path | None = None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(folder or tmp)
        for kind in kinds:
            for seed in seeds:
                scene = make_scene(d, kind, size, seed)
                runs = {"auto": run(scene), "off": run(scene, refine="off")}
                if scale2:
                    runs["scale2"] = run(scene, scale=2.0, refine="off")
                for name, r in runs.items():
                    r.update(scene=kind, size=size, seed=seed, run=name)
                same = (runs["auto"]["_gdf"].geometry.normalize().to_wkb().tolist()
                        == runs["off"]["_gdf"].geometry.normalize().to_wkb().tolist())
                runs["auto"]["same_as_off"] = bool(same)
                for r in runs.values():
                    r.pop("_gdf")
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    return rows


def table(rows) -> str:
    head = (f"{'scene':8} {'seed':>4} {'run':7} {'truth':>6} {'recall':>7} {'prec':>7} {'encodes':>7} "
            f"{'bound':>6} {'secs':>6}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['scene']:8} {r['seed']:>4} {r['run']:7} {r['truth']:>6} {r['recall']:>7.4f} "
                     f"{r['precision']:>7.4f} {r['encodes']:>7} {r['bound']:>6} {r['seconds']:>6.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=3000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--kinds", default=",".join((*SCENES, "slide")))
    ap.add_argument("--smoke", action="store_true", help="one 1300 px uniform scene, seed 0, no --scale 2")
    a = ap.parse_args(argv)
    if a.smoke:
        rows = bench(1300, [0], kinds=("uniform",), scale2=False)
    else:
        rows = bench(a.size, range(a.seeds), kinds=tuple(a.kinds.split(",")))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
