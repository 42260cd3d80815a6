"""Files of other CRSs and pixel sizes as one map (issue 52): a scene cut 3x3, some files re-projected as a
vendor's gdalwarp would (`sam3tiles.testing.mosaic.warp_file`), segmented against the one-file run.

    python -m benchmarks.bench_warped [--size 6000 4500] [--seed 52] [--fields 4] [--case crs|gsd|both]
                                      [--root PATH] [--smoke]

* **crs**: r0c1 and r1c2 re-projected to EPSG:4326, r2c0 to the next UTM zone (EPSG:32634), the rest as cut;
  run by the lattice rule and with `--crs EPSG:32633`. **gsd**: r1c1 at twice the pixel size (average).
* Each run is `python -m sam3tiles segment FILES --out FOLDER/` (reference backend, three prompts) in a fresh
  process, with `--root`'s sam3tiles (another checkout: the figures before a change); the per-file outputs are
  read back into the scene's CRS. Printed per run: maps, tiles, wall time, and per class the F1 against the
  one-file run's objects (IoU >= 0.5), duplicates, and for the fields (larger than a tile) the pieces and the
  smallest IoU with the truth. Also the plain 3x3 split's wall time (no file warped): the warped reads' cost.

`--smoke`: a 1500 x 1200 scene, in this process's checkout (checks the code; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import emit, smoke, table

PROMPTS = ("red", "blue", "yellow")
ROOT = Path(__file__).resolve().parents[1]
CASES = {"crs": {"r0c1.tif": ("EPSG:4326", None), "r1c2.tif": ("EPSG:4326", None), "r2c0.tif": ("EPSG:32634", None)},
         "gsd": {"r1c1.tif": (None, 2.0)}, "plain": {}}


def delivery(scene, folder: Path, warps: dict) -> str:
    """The scene cut 3x3 into `folder`, the files in `warps` re-projected ({name: (crs, pixel factor)})."""
    from sam3tiles.testing.mosaic import split_raster, warp_file

    cut = folder.parent / (folder.name + "-cut")
    folder.mkdir(parents=True)
    for piece in split_raster(scene.path, cut):
        name = piece.path.name
        if name in warps:
            crs, factor = warps[name]
            warp_file(piece.path, folder / name, crs, pixel=0.3 * factor if factor else None,
                      resampling="nearest" if crs else "average")
        else:
            shutil.copy(piece.path, folder / name)
    return str(folder / "*.tif")


def segment(inputs: str, out: Path, root: Path, *extra: str) -> dict:
    """One run in a fresh process of `root`'s sam3tiles: its report's maps and tiles, wall time, objects."""
    import geopandas as gpd
    import json
    import pandas as pd

    args = [sys.executable, "-m", "sam3tiles", "segment", inputs, *(a for p in PROMPTS for a in ("--text", p)),
            "--backend", "reference", "--out", f"{out}/", "--no-preview", "--clean", *extra]
    env = dict(os.environ, PYTHONPATH=str(root))
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=str(root))
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    parts = [gpd.read_file(p) for p in sorted(out.glob("*.gpkg"))]
    objects = pd.concat([p.to_crs(32633) for p in parts if len(p)], ignore_index=True)
    found = sorted(out.parent.glob(f"{out.name}*report.json")) + sorted(out.glob("*report.json"))
    report = json.loads(found[0].read_text()) if found else {}
    maps = report.get("maps") or [{}]
    return {"objects": gpd.GeoDataFrame(objects, crs=32633), "wall_s": round(wall, 2), "maps": len(maps),
            "tiles": report.get("done")}


def scores(got, one, truth) -> dict:
    """Per class: F1 and duplicates against the one-file run; for the fields, pieces and the smallest IoU."""
    import shapely

    from sam3tiles.evaluate import evaluate

    ev = evaluate(got, one.rename(columns={"prompt": "class"}))
    out = {f"f1 {r['class']}": round(float(r["f1"]), 4) for _, r in ev.iterrows()}
    out["duplicates"] = int(ev["duplicates"].sum())
    fields, pieces = truth[truth["class"] == "yellow"], got[got["prompt"] == "yellow"]
    out["fields"] = f"{len(pieces)} for {len(fields)}"
    ious = [max((shapely.area(shapely.intersection(f, p)) / shapely.area(shapely.union(f, p))
                 for p in pieces.geometry), default=0.0) for f in fields.geometry]
    out["field IoU min"] = round(min(ious), 4) if ious else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, nargs=2, default=(6000, 4500))
    ap.add_argument("--seed", type=int, default=52)
    ap.add_argument("--fields", type=int, default=4)
    ap.add_argument("--case", choices=("crs", "gsd", "both"), default="both")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose sam3tiles runs the segments")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a 1500 x 1200 scene")
    a = ap.parse_args(argv)
    if smoke(a.smoke):
        a.size, a.fields = (1500, 1200), 0
    from sam3tiles.testing.demo import write_scene

    work = Path(tempfile.mkdtemp(prefix="bench-warped-"))
    try:
        scene = write_scene(work / "scene.tif", *a.size, seed=a.seed, n_fields=a.fields)
        one = segment(str(scene.path), work / "one", a.root)
        rows = [["one file", one["maps"], one["tiles"], one["wall_s"], ""]]
        result = {"size": list(a.size), "seed": a.seed, "root": str(a.root), "one": {"wall_s": one["wall_s"]}}
        cases = ["plain"] + (["crs", "gsd"] if a.case == "both" else [a.case])
        for case in cases:
            inputs = delivery(scene, work / case, CASES[case])
            runs = [("rule", ())] + ([("--crs EPSG:32633", ("--crs", "EPSG:32633"))] if case == "crs" else [])
            for how, extra in runs:
                try:
                    got = segment(inputs, work / f"{case}-{len(extra)}", a.root, *extra)
                except RuntimeError as e:  # an option `--root`'s checkout does not have (before the change)
                    rows.append([f"{case} {how}", "-", "-", "-", str(e).splitlines()[-1]])
                    continue
                s = scores(got["objects"], one["objects"], scene.truth)
                result[f"{case} {how}"] = {k: v for k, v in got.items() if k != "objects"} | s
                rows.append([f"{case} {how}", got["maps"], got["tiles"], got["wall_s"],
                             ", ".join(f"{k} {v}" for k, v in s.items())])
        print(table(rows, ["run", "maps", "tiles", "wall s", "against the one-file run"]))
        emit(result, a.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
