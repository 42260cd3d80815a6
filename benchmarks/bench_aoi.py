"""Only where there is something to find (issue 39): an area of interest and a slide's tissue, against full runs.

    python -m benchmarks.bench_aoi                    # an 8000 px scene and 12000 x 4000 slides, 1008 px tiles
    python -m benchmarks.bench_aoi --size 6000 --slide 9000
    python -m benchmarks.bench_aoi --smoke            # seconds: small sizes, 512 px tiles
    python -m benchmarks.bench_aoi --size 6000 --fields 12 --no-tissue   # the area's runs alone, many fields
    python -m benchmarks.bench_aoi --size 6000 --fields 12 --no-tissue --no-misbehaving --repeat 5  # + median
    python -m benchmarks.bench_aoi --size 6000 --fields 12 --no-tissue --no-misbehaving --repeat 4 --encode 0.3

*Area.* A demo scene (cars, buildings, fields larger than a tile) and a square of a quarter of it, turned by
20 degrees, given in EPSG:4326. The full run, then the area's runs: with the margin the plan grows the area
by (0, half the overlap: the default, the whole overlap), with and without growing into skipped tiles at run
time, and clipped. Each row: tiles planned and encoded (grown), the GPU time the plan estimates, wall
seconds (and against the full run's scaled by the share of its tiles encoded: an area run should cost per
tile what the full run does), the objects written against the full run's objects that intersect the area (F1
at IoU 0.99, objects off by more, the smallest IoU). The reference backend answers every tile the same
whatever its neighbours; the misbehaving one (`sam3tiles.testing.misbehaving`, all faults) differs between
tiles as a real SAM 3 does, so which tiles see an object changes what the merge writes.

*Tissue.* Slides with tissue on a third of their area (brightfield, fluorescence): `--tissue off` against
`auto`: tiles, the GPU minutes the plan's costs give them, wall seconds, the mask's seconds, F1 against the
full run (IoU 0.5) and against the truth. The reference backend has no encoder: its time follows the
objects, not the tiles, so the wall seconds change less than a GPU's would (glass tiles cost it little).

The table's full run is the process's first and pays its warm-ups, so its ratios read low; `--repeat N`
alternates the full and the default area run N times after a warm-up run and prints the median ratio;
`--encode S` runs those on the simulated GPU (an encode lasts S seconds): the reference backend's cost follows
what a tile holds, and an area's tiles hold more than the full run's average (the fields across its edge), so
its ratio reads high where a GPU's fixed cost a tile would not.

The figures are printed as a table and one JSON line; nothing is asserted (tests/test_aoi.py does that).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import tempfile
import time
from pathlib import Path

import geopandas as gpd
import numpy as np
import shapely
from shapely import affinity
from shapely.geometry import box

from sam3tiles.evaluate import evaluate
from sam3tiles.options import Options
from sam3tiles.run.pipeline import segment_job
from sam3tiles.run.planning.plan import DECODE_S, ENCODE_S, plan_input
from sam3tiles.testing.demo import CRS_DEMO, ORIGIN, PIXEL, write_scene
from sam3tiles.testing.slidegen import write_slide

from .synthetic import cache_folder

PROMPTS = ["red", "blue", "yellow"]


def best_iou(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame) -> np.ndarray:
    """Per object of `a`, its best IoU with an object of `b` of its prompt."""
    out = np.zeros(len(a))
    for prompt in set(a["prompt"]):
        sel = np.flatnonzero((a["prompt"] == prompt).to_numpy())
        gb = np.asarray(b.geometry[b["prompt"] == prompt].values, dtype=object)
        if not len(gb):
            continue
        tree = shapely.STRtree(gb)
        ga = np.asarray(a.geometry.values, dtype=object)
        for k in sel:
            hits = tree.query(ga[k], predicate="intersects")
            if len(hits):
                inter = shapely.area(shapely.intersection(ga[k], gb[hits]))
                out[k] = float(np.max(inter / shapely.area(shapely.union(ga[k], gb[hits]))))
    return out


def compare(got: gpd.GeoDataFrame, want: gpd.GeoDataFrame, iou: float = 0.99) -> dict:
    """F1 at `iou` of `got` against `want`, objects of either side off by more, the smallest best IoU."""
    table = evaluate(got, want.assign(**{"class": want["prompt"]}), iou_min=iou)
    a, b = best_iou(got, want), best_iou(want, got)
    f1 = float((table["tp"].sum() * 2) / max(1, table["pred"].sum() + table["truth"].sum()))
    return {"objects": len(got), "want": len(want), "f1": round(f1, 4),
            "off": int((a < iou).sum() + (b < iou).sum()),
            "min_iou": round(float(min(a.min(initial=1), b.min(initial=1))), 3)}


@contextlib.contextmanager
def variant(margin: float | None, grow: bool):
    """The plan's margin (grid pixels; None: the default, half the overlap) and run-time growth, switched for
    one run (the benchmark measures what the defaults chose between)."""
    from sam3tiles.run.planning import area as run_area
    from sam3tiles.tiling.selection import AreaSkip

    saved_skip, saved_init = run_area.AreaSkip, run_area.InputArea.__init__

    def init(self, *a, **k):
        saved_init(self, *a, **k)
        if not grow:
            self.growth = None

    run_area.AreaSkip = functools.partial(AreaSkip, margin=margin)
    run_area.InputArea.__init__ = init
    try:
        yield
    finally:
        run_area.AreaSkip, run_area.InputArea.__init__ = saved_skip, saved_init


def quarter(width: int, path: Path) -> tuple[Path, object]:
    """A square of a quarter of the scene turned by 20 degrees, in EPSG:4326; returned in the scene's CRS."""
    x0, y0 = ORIGIN[0] + width / 4 * PIXEL, ORIGIN[1] - 3 * width / 4 * PIXEL
    sq = affinity.rotate(box(x0, y0, x0 + width / 2 * PIXEL, y0 + width / 2 * PIXEL), 20)
    gpd.GeoDataFrame(geometry=[sq], crs=CRS_DEMO.to_wkt()).to_crs(4326).to_file(path)
    return path, gpd.read_file(path).to_crs(CRS_DEMO.to_wkt()).geometry.iloc[0]


VARIANTS = (("margin 0", 0.0, True, False), ("margin overlap/2 (default)", None, True, False),
            ("margin overlap", "overlap", True, False), ("overlap/2, no growth", None, False, False),
            ("overlap/2, clipped", None, True, True))


def area_rows(width: int, tiling: dict, backend, label: str, folder: Path, workers: int,
              variants=VARIANTS, fields: int | None = None) -> list[dict]:
    """The full run and the area's `variants` (name, margin, growth, clip) on one scene, answered by `backend`;
    `fields`: how many fields larger than a tile it holds (None: the demo's, one per 5000 px square)."""
    scene, area_file, area = _scene(width, tiling, folder, fields)
    kw = dict(backend=backend, checkpoint=False, workers=workers, **tiling)
    t0 = time.perf_counter()
    full, rf = segment_job(str(scene), PROMPTS, **kw)
    full_s = time.perf_counter() - t0
    want = full[full.intersects(area)]
    per = ENCODE_S + DECODE_S * len(PROMPTS)
    rows = [{"run": f"{label}: full", "planned": rf.tiles, "encoded": rf.done, "grown": 0,
             "gpu_min": round(rf.tiles * per / 60, 2), "wall_s": round(full_s, 1), **compare(want, want)}]
    for name, margin, grow, clip in variants:
        with variant(float(tiling["overlap"]) if margin == "overlap" else margin, grow):
            inp = plan_input(str(scene), Options(backend="reference", aoi=str(area_file), **tiling))
            t0 = time.perf_counter()
            got, r = segment_job(str(scene), PROMPTS, aoi=str(area_file), aoi_clip=clip, **kw)
            wall = time.perf_counter() - t0
        row = {"run": f"{label}: {name}", "planned": inp.n_to_run, "encoded": r.done,
               "grown": r.area.get("tiles_grown", 0), "gpu_min": round(inp.n_to_run * per / 60, 2),
               "wall_s": round(wall, 1), "wall_vs_share": round(wall / (r.done / rf.done * full_s), 2)}
        if clip:
            row.update(objects=len(got), want=len(want), inside=bool(got.within(area.buffer(1e-6)).all()))
        else:
            row.update(compare(got, want))
        rows.append(row)
    return rows


def _scene(width: int, tiling: dict, folder: Path, fields: int | None):
    scene = folder / f"aoi-scene-{width}-t{tiling['tile_size']}-f{fields}.tif"
    if not scene.exists():
        write_scene(scene, width, width, seed=3, tile=tiling["tile_size"], n_fields=fields)
    return (scene, *quarter(width, folder / f"aoi-{width}.geojson"))


def alternated(width: int, tiling: dict, backend, folder: Path, workers: int, fields: int | None,
               repeat: int, encode: float | None = None) -> dict:
    """The full run and the default area run, alternated `repeat` times after an untimed full run (the first
    run of a process pays imports and warm-ups; a loaded machine drifts): area wall / (encoded share x full
    wall) per pair and its median. `encode`: on the simulated GPU instead (each encode lasts that many
    seconds, a decode 0.01 s: a GPU's cost per tile, whatever the tile holds)."""
    import statistics

    scene, area_file, _ = _scene(width, tiling, folder, fields)
    kw = dict(backend=backend, checkpoint=False, workers=workers, **tiling)
    if encode is not None:
        kw.update(backend="simulated", encode_seconds=encode, decode_seconds=0.01)
    segment_job(str(scene), PROMPTS, **kw)
    ratios, walls = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        _, rf = segment_job(str(scene), PROMPTS, **kw)
        t1 = time.perf_counter()
        _, r = segment_job(str(scene), PROMPTS, aoi=str(area_file), **kw)
        t2 = time.perf_counter()
        walls.append((round(t1 - t0, 2), round(t2 - t1, 2)))
        ratios.append(round((t2 - t1) / (r.done / rf.done * (t1 - t0)), 2))
    return {"pairs": repeat, "full_area_walls": walls, "ratios": ratios, "median": round(statistics.median(ratios), 3),
            "backend": kw["backend"] if encode is None else f"simulated GPU, {encode} s an encode"}


MODES = (("brightfield", ["indigo", "crimson"], {}),
         ("fluorescence", ["white"], {"cell": 64, "fill": 0.6, "size": (20.0, 44.0)}))


def tissue_rows(width: int, height: int, tiling: dict, folder: Path, workers: int, modes=MODES) -> list[dict]:
    """--tissue off against auto on a brightfield and a fluorescence slide, tissue on a third of each."""
    from sam3tiles.readers import open_source
    from sam3tiles.run.planning.area import plan_skips

    rows = []
    for mode, prompts, layout in modes:
        slide = write_slide(folder / f"aoi-{mode}-{width}.ome.tif", width, height, seed=1, mode=mode, tissue=1 / 3,
                            **layout)
        t0 = time.perf_counter()
        with open_source(slide.path) as src:
            plan_skips(src, Options(**tiling))
        mask_s = time.perf_counter() - t0
        out = {}
        for tissue in ("off", "auto"):
            t0 = time.perf_counter()
            out[tissue] = segment_job(str(slide.path), prompts, backend="reference", checkpoint=False, workers=workers,
                                      tissue=tissue, **tiling) + (time.perf_counter() - t0,)
        (full, rf, fs), (auto, ra, as_) = out["off"], out["auto"]
        vs_full = evaluate(auto, full.assign(**{"class": full["prompt"]}))
        per = (ENCODE_S + DECODE_S * len(prompts)) / 60
        rows.append({"run": f"{mode} slide {width}x{height}, tissue {slide.tissue.area(width, height):.0%}",
                     "tiles_off": rf.done, "tiles_auto": ra.done, "share": round(ra.done / max(1, rf.done), 2),
                     "sub_tiles": sum(rf.refine.get("sub_tiles", {}).values()),
                     "gpu_min_off": round(rf.done * per, 2), "gpu_min_auto": round(ra.done * per, 2),
                     "wall_off_s": round(fs, 1), "wall_auto_s": round(as_, 1), "mask_s": round(mask_s, 2),
                     "f1_vs_full": round(float(vs_full["f1"].min()), 4),
                     "f1_vs_truth": round(float(evaluate(auto, slide.truth)["f1"].min()), 4),
                     "nuclei": f"{len(auto)} of {len(full)}"})
    return rows


def share_line(rows: list[dict]) -> str:
    """The area runs' wall against the full run's wall scaled by the share of its tiles they encoded: 1.0
    is an area run that costs per tile what the full run does (its CPU work follows its tiles)."""
    runs = ", ".join(f"{r['run']} {r['wall_vs_share']}" for r in rows if "wall_vs_share" in r)
    return f"area wall / (encoded share x full wall): {runs}"


def table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    lines = ["  ".join(k.ljust(widths[k]) for k in keys)]
    lines += ["  ".join(str(r.get(k, "")).ljust(widths[k]) for k in keys) for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8000, help="the scene's side (px)")
    ap.add_argument("--slide", type=int, default=12000, help="the slides' width (px; height a third)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-misbehaving", action="store_true", help="the reference backend only")
    ap.add_argument("--no-tissue", action="store_true", help="the area's runs only, no slides")
    ap.add_argument("--fields", type=int, default=None, help="fields larger than a tile in the scene (default: "
                    "the demo's, one per 5000 px square; more cross the area's edge, which the run grows across)")
    ap.add_argument("--smoke", action="store_true", help="a 1600 px scene, the default and the clipped run, "
                    "one pair; a 2400 px brightfield slide; 512 px tiles")
    ap.add_argument("--repeat", type=int, default=0, help="then the full and the default area run alternated "
                    "this many times after a warm-up run: the median ratio (the table's runs are one each)")
    ap.add_argument("--encode", type=float, default=None, help="the alternated runs on a simulated GPU whose encode "
                    "lasts this many seconds (the reference backend's cost follows what a tile holds, a GPU's not)")
    a = ap.parse_args(argv)
    tiling = {"tile_size": 512, "overlap": 128} if a.smoke else {"tile_size": 1008, "overlap": 256}
    size, slide = (1600, 2400) if a.smoke else (a.size, a.slide)
    with tempfile.TemporaryDirectory(dir=cache_folder() if cache_folder().exists() else None) as tmp:
        folder = Path(tmp)
        rows = area_rows(size, tiling, "reference", "reference", folder, a.workers,
                         VARIANTS[1::3] if a.smoke else VARIANTS, a.fields)
        if not (a.no_misbehaving or a.smoke):
            from sam3tiles.model.reference import ReferenceRuntime
            from sam3tiles.testing.misbehaving import MisbehavingRuntime

            rows += area_rows(size, tiling, functools.partial(MisbehavingRuntime, ReferenceRuntime(), "all"),
                              "misbehaving", folder, a.workers, fields=a.fields)
        repeat = a.repeat or int(a.smoke)  # the smoke runs one pair
        alt = (alternated(size, tiling, "reference", folder, a.workers, a.fields, repeat, a.encode) if repeat
               else None)
        slides = [] if a.no_tissue else tissue_rows(slide, slide // 3, tiling, folder, a.workers,
                                                    MODES[:1] if a.smoke else MODES)
    fields = f", {a.fields} fields larger than a tile" if a.fields is not None else ""
    print(f"area of interest: a {size} px scene{fields}, a quarter of it turned by 20 degrees, given in EPSG:4326; "
          f"tiles {tiling['tile_size']} px, overlap {tiling['overlap']}")
    print(table(rows))
    print(share_line(rows))
    if alt is not None:
        print(f"alternated after a warm-up ({alt['backend']}, default area): ratios {alt['ratios']}, "
              f"median {alt['median']}")
    if slides:
        print("\ntissue: slides with tissue on a third of their area")
        print(table(slides))
    print(json.dumps({"area": rows, "tissue": slides, "alternated": alt}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
