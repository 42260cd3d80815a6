"""One exemplar, any size, finds its kind across a multi-tile scene with default options (issue 19).

    python -m benchmarks.bench_exemplar_sizes                 # sizes 40 100 160 250, seeds 0 1 2
    python -m benchmarks.bench_exemplar_sizes --smoke         # one size, one seed, a small scene

On generated scenes (flat-coloured rectangles of a target kind and another kind on a noisy background,
0.5 m UTM pixels; objects `size` px wide, +-15 %), through the whole pipeline (`segment_job`, the
reference backend, default options) it prints, per exemplar size and seed:

* `box`: one positive box around one target object near the top-left corner: recall / precision of the
  target kind over the whole scene, and what it cost (strip px, tiles vs the default grid, encodes,
  pastes by area);
* `in_place`: the same box with --box-scope tile (acts only where it lies), for comparison;
* `negative`: a scene with a look-alike kind; one positive box and one negative box on a look-alike:
  look-alikes found anywhere (should be 0) and the target's recall;
* `chip` / `chip_geo`: an example image cut from another scene (other seed) as a plain PNG (taken at the
  run's scale), and as a GeoTIFF at twice the target's pixel size (resampled to it);
* `text`: a text prompt ("red", the other kind) with and without the exemplar prompt in the same run:
  F1 of the text prompt both ways (the strip and the pastes must cost it nothing).

Prints a table, and JSON with --json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from affine import Affine  # noqa: E402

T = Affine(0.5, 0, 400000, 0, -0.5, 5000000)
BG = (92, 112, 84)
COLOURS = {"blue": (18, 22, 232), "navy": (45, 45, 200), "red": (238, 18, 18)}


def write_scene(path: Path, side: int, size: int, seed: int, kinds=("blue", "red"), transform=T):
    """A side x side scene of rectangles `size` px wide (+-15 %), 60-100 % as tall, kinds at random on a
    jittered lattice; returns [(kind, (x0, y0, x1, y1) pixels)]."""
    from sam3tiles.testing import write_raster

    rng = np.random.default_rng(seed)
    img = (np.asarray(BG, np.float32)[:, None, None] + rng.uniform(-9, 9, (3, side, side))).astype(np.uint8)
    step = int(size * 1.15) + max(24, size // 3)
    truth = []
    for y in range(12, side - step, step):
        for x in range(12, side - step, step):
            w = int(min(step - 12, round(size * rng.uniform(0.85, 1.15))))
            h = int(round(w * rng.uniform(0.6, 1.0)))
            x0, y0 = x + int(rng.integers(0, step - w - 8 + 1)), y + int(rng.integers(0, step - h - 8 + 1))
            kind = kinds[int(rng.integers(len(kinds)))]
            img[:, y0:y0 + h, x0:x0 + w] = np.asarray(COLOURS[kind], np.uint8)[:, None, None]
            truth.append((kind, (x0, y0, x0 + w, y0 + h)))
    write_raster(path, img, transform=transform)
    return truth


def crs_box(rect, transform=T):
    import shapely

    (a, b), (c, d) = transform @ rect[:2], transform @ rect[2:]
    return shapely.box(min(a, c), min(b, d), max(a, c), max(b, d))


def pick(truth, kind, size):
    """The object of `kind` nearest the top-left corner whose width is nearest `size`."""
    cands = [r for k, r in truth if k == kind]
    return min(cands, key=lambda r: (abs((r[2] - r[0]) - size) > 0.05 * size, r[0] + r[1]))


def score(gdf, truth, kind) -> dict:
    from sam3tiles.evaluate import evaluate_class

    s = evaluate_class(list(gdf.geometry), [crs_box(r) for k, r in truth if k == kind])
    return {k: round(float(s[k]), 4) for k in ("recall", "precision", "f1")}


def _cost(rep) -> dict:
    e = rep.exemplars
    return {"tiles": rep.tiles, "encodes": rep.done, "strip_px": e.get("strip_px", 0),
            "extra_tiles": e.get("extra_tiles", 0), "margin": e.get("margin", 0), "padding": e.get("padding", 0),
            "strip": e.get("strip", 0), "dropped": e.get("dropped", 0)}


def write_chip(tmp: Path, size: int, seed: int, geo: bool) -> Path:
    """A target object cut from another scene: a PNG (plain), or a GeoTIFF at twice the pixel size."""
    import rasterio
    from PIL import Image

    from sam3tiles.testing import write_raster

    other = tmp / f"other{seed}.tif"
    truth = write_scene(other, max(5 * size, 900), size, seed + 100)
    x0, y0, x1, y1 = pick(truth, "blue", size)
    with rasterio.open(other) as ds:
        chip = ds.read(window=((y0, y1), (x0, x1)))
    if not geo:
        path = tmp / f"chip{seed}.png"
        Image.fromarray(chip.transpose(1, 2, 0)).save(path)
        return path
    half = chip[:, : chip.shape[1] // 2 * 2, : chip.shape[2] // 2 * 2].astype(np.float32)
    half = half.reshape(3, half.shape[1] // 2, 2, half.shape[2] // 2, 2).mean(axis=(2, 4)).round().astype(np.uint8)
    t = Affine(1.0, 0, 600000, 0, -1.0, 5100000)  # 1 m pixels elsewhere in the same CRS
    return write_raster(tmp / f"chip{seed}.tif", half, transform=t)


def run_size(tmp: Path, side: int, size: int, seed: int) -> dict:
    from sam3tiles.run.pipeline import segment_job

    scene = tmp / f"scene{size}_{seed}.tif"
    truth = write_scene(scene, side, size, seed)
    rect = pick(truth, "blue", size)
    box = tuple(crs_box(rect).bounds)
    out = {"size": size, "seed": seed, "box_w": rect[2] - rect[0], "objects": sum(k == "blue" for k, _ in truth)}
    kw = {"backend": "reference", "checkpoint": False}
    gdf, rep = segment_job(str(scene), [], boxes=[box], **kw)
    out["box"] = {**score(gdf, truth, "blue"), **_cost(rep)}
    gdf, rep = segment_job(str(scene), [], boxes=[box], box_scope="tile", **kw)
    out["in_place"] = {**score(gdf, truth, "blue"), "tiles": rep.tiles}
    for name, geo in (("chip", False), ("chip_geo", True)):
        chip = write_chip(tmp, size, seed, geo)
        gdf, rep = segment_job(str(scene), [], example_images=[str(chip)], **kw)
        out[name] = {**score(gdf, truth, "blue"), **_cost(rep)}
    out["text"] = text_f1(scene, truth, box)
    look = tmp / f"look{size}_{seed}.tif"
    ltruth = write_scene(look, side, size, seed, kinds=("blue", "navy"))
    pos, neg = pick(ltruth, "blue", size), pick(ltruth, "navy", size)
    gdf, rep = segment_job(str(look), [], boxes=[tuple(crs_box(pos).bounds),
                                                   (*crs_box(neg).bounds, False)], **kw)
    navy = [crs_box(r) for k, r in ltruth if k == "navy"]
    import shapely

    hits = int(shapely.STRtree(navy).query(list(gdf.geometry), predicate="intersects").shape[1]) if len(gdf) else 0
    out["negative"] = {**score(gdf, ltruth, "blue"), "lookalikes_found": hits, "lookalikes": len(navy)}
    return out


def text_f1(scene: Path, truth, box) -> dict:
    """F1 of the text prompt 'red' alone, and beside a box-only prompt (the blue exemplar) in one run."""
    from sam3tiles.options import Options
    from sam3tiles.prompts.prompt import GeoBox, Prompt
    from sam3tiles.run.pipeline import execute
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    ref = Options(backend="reference")
    alone = plan_run(str(scene), ["red"], options=ref, targets=Targets(checkpoint=False))
    both = plan_run(str(scene), ["red"], boxes=[box], options=ref, targets=Targets(checkpoint=False))
    # the text prompt without the box, the box as a prompt of its own: exemplars on the text's tiles
    both = dataclasses.replace(both, prompts=(Prompt("red"), Prompt(None, (GeoBox(*box),))))
    res = {}
    for name, plan in (("alone", alone), ("with_exemplars", both)):
        gdf, rep = execute(plan)
        res[name] = score(gdf[gdf["prompt"] == "red"], truth, "red")["f1"]
        res[f"{name}_tiles"] = rep.tiles
    res["delta"] = round(abs(res["alone"] - res["with_exemplars"]), 4)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[40, 100, 160, 250])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--side", type=int, default=0, help="scene side in px (default: 2400, 3000 for 250 px)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.smoke:
        a.sizes, a.seeds, a.side = [160], [0], 1100
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for size in a.sizes:
            for seed in a.seeds:
                side = a.side or (3000 if size >= 200 else 2400)
                rows.append(run_size(Path(d), side, size, seed))
                r = rows[-1]
                print(f"size {size:3d} seed {seed}: box {r['box_w']} px; box R {r['box']['recall']:.3f} P "
                      f"{r['box']['precision']:.3f} (tiles {r['box']['tiles']}, strip {r['box']['strip_px']} px, "
                      f"+{r['box']['extra_tiles']} tiles; pasted m/p/s {r['box']['margin']}/{r['box']['padding']}/"
                      f"{r['box']['strip']}); in place R {r['in_place']['recall']:.3f} "
                      f"(tiles {r['in_place']['tiles']}); "
                      f"chip R {r['chip']['recall']:.3f} P {r['chip']['precision']:.3f}; geo chip R "
                      f"{r['chip_geo']['recall']:.3f} P {r['chip_geo']['precision']:.3f}; negative: "
                      f"{r['negative']['lookalikes_found']}/{r['negative']['lookalikes']} look-alikes, R "
                      f"{r['negative']['recall']:.3f} P {r['negative']['precision']:.3f}; text F1 "
                      f"{r['text']['alone']:.4f} alone, {r['text']['with_exemplars']:.4f} with exemplars", flush=True)
    if a.json:
        print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
