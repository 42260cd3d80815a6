"""Does SAM 3 find an exemplar pasted into a tile as it finds it where it lies? (issues 15, 19)

    python -m benchmarks.bench_exemplar_gpu --model ~/.cache/sam3tiles/models/sam3-onnx-v0.3.0 --device cuda
    python -m benchmarks.bench_exemplar_gpu --image ortho.tif --box MINX,MINY,MAXX,MAXY --kind-file truth.gpkg ...
    python -m benchmarks.bench_exemplar_gpu --smoke          # CPU, the small contract test graphs, ~1 min

On a scene (generated: blue buildings, red cars, yellow fields; or `--image` with its own `--box` and
optional truth `--kind-file`), one positive example box, and `--tiles` tiles, it runs sam3tiles's own
path (read the tile, `exemplars.plan_tile`, `TilePastes.compose`, encode once, decode, `PasteScreen`,
polygons) in four ways and scores the boxes' kind against the truth in each tile's core (IoU >= 0.5):

* `in_place`: the tile that holds the exemplar, box where it lies (today's behaviour);
* `pasted_home`: the same tile, the exemplar also pasted into its margin and the box on the copy: the
  design assumes this finds what `in_place` finds;
* `pasted_far`: tiles far from the exemplar with the pasted copy (what --box-scope image does);
* `none_far`: the same far tiles without a paste (what --box-scope tile does: no example, nothing);
* `strip_*`: the same four for a building too large for the margin, on the grid narrowed to leave an
  exemplar strip (`sam3tiles.prompts.strip`): the copy is pasted in the strip;
* `chip_far`: far tiles with a chip cut from another scene (`--example-image`) pasted.

It prints recall / precision per way, detections dropped on pastes, and ms for encode, decode and the
paste (compose; cropping with and without the screen) per tile. Prints JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "tests")]


def _scene(tmp: Path, size: int):
    """The demo scene; a modest rectangular building (its patch fits the default context margin), a large
    one (it needs the exemplar strip), and a chip cut from another scene (seed 8) as a plain PNG."""
    from PIL import Image

    from sam3tiles.testing.demo import write_scene

    scene = write_scene(tmp / "scene.tif", size, size, seed=7)
    truth = scene.truth[scene.truth["class"] == "blue"]
    rects = truth[truth.geometry.area / truth.geometry.envelope.area > 0.99]
    side = np.sqrt(rects.geometry.area) / 0.3  # px
    small, large = rects[side < 80], rects[side > 100]  # a patch over ~111 px fits no margin
    other = write_scene(tmp / "other.tif", size, size, seed=8)
    o = other.truth[(other.truth["class"] == "blue")
                    & (other.truth.geometry.area / other.truth.geometry.envelope.area > 0.99)]
    import rasterio
    from rasterio.windows import from_bounds

    with rasterio.open(other.path) as ds:
        px = ds.read(window=from_bounds(*o.geometry.iloc[0].bounds, ds.transform).round_offsets().round_lengths())
    Image.fromarray(px.transpose(1, 2, 0)).save(tmp / "chip.png")
    big = large.geometry.iloc[int(np.argmax(large.geometry.area))].bounds if len(large) else None
    return scene.path, truth, small.geometry.iloc[0].bounds, big, str(tmp / "chip.png")


def _score(pieces, truth, core):
    from sam3tiles.evaluate import evaluate_class

    pred = [g for g in pieces.geometry if core.contains(g.centroid)]
    real = [g for g in truth.geometry if core.contains(g.centroid)]
    s = evaluate_class(pred, real)
    return {"truth": len(real), "pred": len(pred), "tp": s["tp"]}


class Bench:
    def __init__(self, src, runtime, prompt, truth):
        self.src, self.rt, self.prompt, self.truth = src, runtime, prompt, truth
        self.frames = None  # the frames of the grid the tiles run are of (`TileFrames`), set with the grid
        self.ms = {"encode": [], "decode": [], "compose": [], "crop_pasted": [], "crop_plain": []}

    def run(self, tile, boxes, pastes):
        """Polygons of one tile: encode once, one decode per box pass, paste screening when `pastes`."""
        from sam3tiles.prompts.prompt import box_passes
        from sam3tiles.vectorize.pieces import crop_detections, pieces_from_crops

        image = self.src.read_tile(tile)
        screen = None
        if pastes is not None:
            t0 = time.perf_counter()
            image, screen = pastes.compose(image)
            self.ms["compose"].append(1000 * (time.perf_counter() - t0))
        crop_s = 0.0
        t0 = time.perf_counter()
        emb = self.rt.encode(image)
        self.ms["encode"].append(1000 * (time.perf_counter() - t0))
        crops = []
        for pi, chunk in enumerate(box_passes(boxes, self.rt.box_slots) if boxes else [[]]):
            t0 = time.perf_counter()
            det = self.rt.decode(emb, self.prompt, chunk)
            self.ms["decode"].append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            crops += (screen.crops if screen else crop_detections)(det, 0, pi, tile.valid_wh, None)
            crop_s += time.perf_counter() - t0
        self.ms["crop_pasted" if screen else "crop_plain"].append(1000 * crop_s)
        core = self.frames.frame(tile).core
        return _score(pieces_from_crops(crops, tile), self.truth, core), screen.stats() if screen else {}


def _total(rows):
    t = {k: sum(r[0][k] for r in rows) for k in ("truth", "pred", "tp")}
    t["recall"] = round(t["tp"] / t["truth"], 3) if t["truth"] else None
    t["precision"] = round(t["tp"] / t["pred"], 3) if t["pred"] else None
    t["dropped_on_pastes"] = sum(r[1].get("dropped", 0) for r in rows)
    t["tiles"] = len(rows)
    return t


def _ways(src, rt, truth, box, n_tiles: int, tile_size: int, prefix: str, b: "Bench") -> tuple[dict, object]:
    """in_place / pasted_home / pasted_far / none_far (module notes) for one positive box on a grid of
    `tile_size` (1008: the default grid, the paste in the margin; less: an exemplar strip)."""
    from sam3tiles.model.runtime import MODEL_SIZE, ExampleBox
    from sam3tiles.prompts.exemplars import Paste, TilePlan, input_exemplars, paste_area, place
    from sam3tiles.prompts.prompt import GeoBox, Prompt, tile_boxes
    from sam3tiles.tiling.frame import TileFrames
    from sam3tiles.tiling.grid import TileGrid

    gb = GeoBox(*box)
    grid = TileGrid(src.width, src.height, tile_size=tile_size, transform=src.transform)
    b.frames = TileFrames(grid)
    tiles = list(grid)
    ex = input_exemplars(src, [Prompt(None, (gb,))], (1.0, 1.0))
    home = next(t for t in tiles if tile_boxes([gb], t))
    e = ex.exemplars[0]
    far = sorted((t for t in tiles if not tile_boxes([gb], t)),
                 key=lambda t: -np.hypot(t.x0 - home.x0, t.y0 - home.y0))[:n_tiles]
    out = {f"{prefix}in_place": [b.run(home, tile_boxes([gb], home), None)]}
    at = place(home, *e.wh, [])
    if at is not None:  # the same tile, but the box on a pasted copy in its margin (or strip)
        x, y = at
        bx0, by0, bx1, by1 = e.box_px
        copy = ExampleBox(((x + (bx0 + bx1) / 2) / MODEL_SIZE, (y + (by0 + by1) / 2) / MODEL_SIZE,
                           (bx1 - bx0) / MODEL_SIZE, (by1 - by0) / MODEL_SIZE))
        plan = TilePlan([Paste(0, x, y, *e.wh, copy, paste_area(home, (x, y, x + e.wh[0], y + e.wh[1])))])
        out[f"{prefix}pasted_home"] = [b.run(home, [copy], plan.for_task(home, ex.exemplars))]
    out[f"{prefix}pasted_far"], out[f"{prefix}none_far"] = [], []
    for t in far:
        plan = ex.plan(t)
        out[f"{prefix}pasted_far"].append(b.run(t, [p.box for p in plan.pastes], plan.for_task(t, ex.exemplars)))
        out[f"{prefix}none_far"].append(b.run(t, [], None))
    return out, ex


def _chip_far(src, rt, chip: str, n_tiles: int, b: "Bench") -> list:
    """Far tiles with an example image (a chip cut from another scene) pasted, no box of this image."""
    from sam3tiles.prompts.chips import parse_example_images
    from sam3tiles.prompts.exemplars import input_exemplars
    from sam3tiles.prompts.prompt import Prompt
    from sam3tiles.tiling.frame import TileFrames
    from sam3tiles.tiling.grid import TileGrid

    (im,) = parse_example_images([chip])
    ex = input_exemplars(src, [Prompt(None, (), (im,))], (1.0, 1.0), {im: (1.0, None)})
    grid = TileGrid(src.width, src.height, transform=src.transform)
    b.frames = TileFrames(grid)
    rows = []
    for t in list(grid)[-n_tiles:]:
        plan = ex.plan(t)
        rows.append(b.run(t, [p.box for p in plan.pastes], plan.for_task(t, ex.exemplars)))
    return rows


def measure(image: str, truth, box, model_dir: str, device: str, n_tiles: int, big_box=None,
            chip: str | None = None) -> dict:
    from sam3tiles.model.onnx import OnnxRuntime
    from sam3tiles.prompts.strip import choose_strip, patch_sizes
    from sam3tiles.readers import open_source

    rt = OnnxRuntime(model_dir, device=device)
    with open_source(image) as src:
        b = Bench(src, rt, rt.prepare_prompt("visual"), truth)
        out, ex = _ways(src, rt, truth, box, n_tiles, 1008, "", b)
        strip = None
        if big_box is not None:  # a box too large for the margin: the grid narrowed to leave a strip
            from sam3tiles.prompts.prompt import GeoBox

            strip = choose_strip(patch_sizes(src.transform, src.width, src.height, [GeoBox(*big_box)], 1.0), 1008, 256)
            if strip.strip:
                out.update(_ways(src, rt, truth, big_box, n_tiles, strip.tile_size, "strip_", b)[0])
        if chip is not None:
            out["chip_far"] = _chip_far(src, rt, chip, n_tiles, b)
    result = {k: _total(v) for k, v in out.items()}
    result["ms"] = {k: round(float(np.median(v)), 2) if v else None for k, v in b.ms.items()}
    result["device"] = rt.device
    result["providers"] = rt.providers
    result["box_slots"] = rt.box_slots
    result["exemplar_px"] = list(ex.exemplars[0].wh)
    result["strip_px"] = strip.strip if strip is not None else 0
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="SAM 3 ONNX folder (default: sam3tiles's model folder)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--tiles", type=int, default=4, help="far tiles to run")
    ap.add_argument("--size", type=int, default=3000, help="side of the generated scene, pixels")
    ap.add_argument("--image", default=None, help="your own raster (with --box and --kind-file)")
    ap.add_argument("--box", default=None, help="MINX,MINY,MAXX,MAXY of one positive exemplar in --image")
    ap.add_argument("--kind-file", default=None, help="vector file of every object of the exemplar's kind")
    ap.add_argument("--big-box", default=None, help="a box in --image too large for the margin (the strip)")
    ap.add_argument("--example-image", default=None, help="a chip of the kind from another image")
    ap.add_argument("--smoke", action="store_true", help="CPU, small contract test graphs (checks the script)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = args.model
        if args.smoke:
            from onnx_graphs import build_contract_models

            model = str(build_contract_models(tmp / "model", decoder="colour", grid=12))
            args.device = "cpu"
        if args.image:
            import geopandas as gpd

            from sam3tiles.prompts.prompt import GeoBox

            gb = GeoBox.parse(args.box)
            truth = gpd.read_file(args.kind_file) if args.kind_file else gpd.GeoDataFrame(geometry=[])
            image, box, big, chip = args.image, (gb.minx, gb.miny, gb.maxx, gb.maxy), None, args.example_image
            if args.big_box:
                g = GeoBox.parse(args.big_box)
                big = (g.minx, g.miny, g.maxx, g.maxy)
        else:
            image, truth, box, big, chip = _scene(tmp, args.size)
        result = measure(str(image), truth, box, model, args.device, args.tiles, big, chip)
    if args.json:
        print(json.dumps(result, default=str))
        return 0
    from benchmarks.common import table

    rows = [[k, v["tiles"], v["truth"], v["pred"], v["recall"], v["precision"], v["dropped_on_pastes"]]
            for k, v in result.items() if isinstance(v, dict) and "tiles" in v]
    print(table(rows, ["way", "tiles", "truth", "pred", "recall", "precision", "dropped on pastes"]))
    print(f"ms per tile (median): {result['ms']}; device {result['device']} {result['providers']}, "
          f"{result['box_slots']} box slot(s), exemplar patch {result['exemplar_px']} px, "
          f"strip {result['strip_px']} px")
    return 0


if __name__ == "__main__":
    sys.exit(main())
