"""A delivery that grows (issue 52): a 4 x 4 delivery segmented, then two files added to its west and segmented
again in the same work folder; against a fresh run on all the files in a new output and work folder (a mosaic's
grid is anchored to its lattice: the same grid, the same objects).

    python -m benchmarks.bench_grown [--cell 1000] [--seed 11] [--smoke]

A `5 * cell` x `4 * cell` px scene (`sam3tiles.testing.demo.write_scene`, seed `--seed`) cut into 5 x 4 files;
the first run takes the 16 east of the west column, the rerun also two of the west column (rows chosen by the
seed). Reference backend, three prompts, in this process. Printed: each run's tiles, computed (done) and reused
(resumed), wall seconds; whether the rerun's objects equal the fresh run's in a new work folder object for
object; F1 per class against the scene's truth of the rerun and of that fresh run.
`--smoke`: cells of 240 px (checks the code; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import emit, smoke, table

PROMPTS = ["red", "blue", "yellow"]


def _run(inputs: str, out: Path, work: Path, **kw) -> dict:
    from sam3tiles import segment_report

    t0 = time.perf_counter()
    r = segment_report(inputs, PROMPTS, backend="reference", out=str(out), work_dir=str(work), **kw)
    return {"tiles": r.tiles, "computed": r.done, "reused": r.resumed, "skipped": r.skipped,
            "objects": r.objects, "wall_s": round(time.perf_counter() - t0, 2)}


def _objects(path: Path) -> list:
    import geopandas as gpd
    import numpy as np

    got = gpd.read_file(path)
    return sorted((r["prompt"], round(r["score"], 6), round(r.geometry.area, 6), tuple(np.round(r.geometry.bounds, 6)))
                  for _, r in got.iterrows())


def _f1(path: Path, truth) -> dict:
    import geopandas as gpd

    from sam3tiles.evaluate import evaluate

    ev = evaluate(gpd.read_file(path), truth)
    return {r["class"]: round(float(r["f1"]), 4) for _, r in ev.iterrows()}


def measure(cell: int, seed: int, folder: Path) -> dict:
    import numpy as np

    from sam3tiles.testing.demo import write_scene
    from sam3tiles.testing.mosaic import split_raster

    scene = write_scene(folder / "scene.tif", 5 * cell, 4 * cell, seed=seed)
    split_raster(scene.path, folder / "cells", cols=5, rows=4)
    files, work = folder / "delivery", folder / "work"
    files.mkdir()
    for r in range(4):
        for c in range(1, 5):
            shutil.copy(folder / "cells" / f"r{r}c{c}.tif", files)
    inputs = str(files / "*.tif")
    first = _run(inputs, folder / "o.gpkg", work)
    west = sorted(np.random.default_rng(seed).choice(4, size=2, replace=False).tolist())
    for r in west:
        shutil.copy(folder / "cells" / f"r{r}c0.tif", files)
    rerun = _run(inputs, folder / "o.gpkg", work, overwrite=True)
    (folder / "new").mkdir()
    elsewhere = _run(inputs, folder / "new" / "new.gpkg", folder / "new-work")
    return {"cell": cell, "seed": seed, "west_rows": west, "first": first, "rerun": rerun,
            "new_work_folder": elsewhere,
            "rerun_equals_new_work_folder": _objects(folder / "o.gpkg") == _objects(folder / "new" / "new.gpkg"),
            "f1_rerun": _f1(folder / "o.gpkg", scene.truth),
            "f1_new_work_folder": _f1(folder / "new" / "new.gpkg", scene.truth)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if smoke(args.smoke):
        args.cell = 240
    with tempfile.TemporaryDirectory(prefix="bench-grown-") as tmp:
        res = measure(args.cell, args.seed, Path(tmp))
    if args.json:
        emit(res, True)
        return 0
    rows = [[k, res[k]["tiles"], res[k]["computed"], res[k]["reused"], res[k]["skipped"], res[k]["objects"],
             res[k]["wall_s"]] for k in ("first", "rerun", "new_work_folder")]
    print(f"scene {5 * res['cell']} x {4 * res['cell']} px (seed {res['seed']}), west files added in rows "
          f"{res['west_rows']}")
    print(table(rows, ["run", "tiles", "computed", "reused", "skipped", "objects", "wall s"]))
    print(f"rerun's objects equal the fresh run's in a new work folder: {res['rerun_equals_new_work_folder']}")
    print(f"F1 vs truth: rerun {res['f1_rerun']}; fresh run in a new work folder {res['f1_new_work_folder']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
