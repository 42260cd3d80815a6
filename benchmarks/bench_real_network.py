"""A real trained network through the merge: the PP-OCRv4 DB text detector on generated text sheets.

    python -m benchmarks.bench_real_network [--size 8000 6000] [--seeds 1 2 3] [--lines] [--smoke] [--json]

The network is a text detector (DB, shipped in the rapidocr-onnxruntime wheel), NOT SAM 3: it answers
one concept, text, with one instance per connected region of its text probability map
(`examples/sam3tiles-dbtext`). What it shows that the stand-ins cannot: a trained network's own
boundaries, scores and misses on each tile, for objects (words, lines up to ~900 px) that cross seams.

Each sheet (`make_sheet`) is cut into the pipeline's tiles; the network answers every tile once, and the
SAME per-tile pieces go to each method of `bench_merge_quality`: `sam3tiles` (merge_pieces), SAHI's
GREEDYNMM and NMS (IOS 0.5; columns left out without the `bench` extra), `centre` (naive tiling), `squash`
(the whole sheet squashed into one 1008 input, the published callers' baseline), and `floor`
(`bench_merge_quality.floor_preds`: what the tiles' own outputs allow any merge that follows ownership).
Scores: precision, recall and F1 at IoU >= 0.3 against the drawn boxes of each line and lone word (a
rotated-rectangle detector's box is taller than the glyphs' extent), duplicates, fragments.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import shapely

from .common import ROOT, emit, table

IOU = 0.3
PROMPT = "text"
METHODS = ("sam3tiles", "sahi-gnmm", "sahi-nms", "centre", "squash")
_LETTERS = list("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


#: Paragraph lengths (lines, drawn uniformly from the tuple) and words per line of `make_sheet`'s layouts.
LAYOUTS = {"mixed": {"paragraphs": (1, 1, 2, 3, 4, 6), "max_words": 12},
           "page": {"paragraphs": (6, 10, 16), "max_words": 16}}


@dataclass(frozen=True)
class Sheet:
    """A generated text sheet: the image file (pixel frame, y down) and the drawn box of every line and
    lone word (shapely boxes, pixels)."""

    path: Path
    truth: tuple


def make_sheet(path, width: int, height: int, seed: int, sizes=(11, 26), density: float = 1.0,
               paragraphs=(1, 1, 2, 3, 4, 6), max_words: int = 12, ink=(0, 70), leading: float = 0.6) -> Sheet:
    """Draw paragraphs of lines (1-12 words, 0.6 x the line height apart) and lone words at
    random places and font sizes (Pillow's bundled font), dark on a light, slightly noisy page; many
    cross the tile seams. `density` scales the number of placement tries. Items keep 1.5 x their line
    height apart horizontally (wider than a word space, so a detector sees separate lines) and 1 x
    vertically. A truth box spans the glyphs' width and the font's ascender-to-descender height."""
    import rasterio
    from PIL import Image, ImageDraw, ImageFont
    from rasterio.errors import NotGeoreferencedWarning

    rng = np.random.default_rng(seed)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    taken: list = []
    truth: list = []
    tries = int(density * width * height / 25000)
    for _ in range(tries):
        size = int(rng.integers(sizes[0], sizes[1] + 1))
        font = ImageFont.load_default(size=size)
        n_lines = int(rng.choice(paragraphs))
        lines = [" ".join("".join(rng.choice(_LETTERS, int(rng.integers(2, 10))))
                          for _ in range(int(rng.integers(1, max_words + 1)))) for _ in range(n_lines)]
        x, y = int(rng.integers(4, width - 40)), int(rng.integers(4, height - 40))
        ascent, descent = font.getmetrics()
        h = ascent + descent  # a line box spans ascender to descender, whatever letters the line has
        step = h + int(round(leading * h))
        boxes = [(draw.textbbox((x, y + i * step), s, font=font)[0], y + i * step,
                  draw.textbbox((x, y + i * step), s, font=font)[2], y + i * step + h)
                 for i, s in enumerate(lines)]
        block = shapely.box(min(b[0] for b in boxes), boxes[0][1], max(b[2] for b in boxes), boxes[-1][3])
        x0, y0, x1, y1 = block.bounds
        if x1 > width - 4 or y1 > height - 4:
            continue
        zone = shapely.box(x0 - 1.5 * h, y0 - h, x1 + 1.5 * h, y1 + h)
        if any(zone.intersects(t) for t in taken):
            continue
        taken.append(block)
        for i, (s, bb) in enumerate(zip(lines, boxes)):
            draw.text((x, y + i * step), s, fill=int(rng.integers(*ink)), font=font)
            truth.append(shapely.box(*bb))
    grey = np.asarray(page, np.float32)
    paper = np.asarray([246, 242, 232], np.float32)[:, None, None] * (grey / 255.0)[None]
    rgb = np.clip(paper + rng.normal(0, 4, (3, height, width)), 0, 255).astype(np.uint8)
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(path, "w", driver="GTiff", width=width, height=height, count=3, dtype="uint8",
                           tiled=True, blockxsize=256, blockysize=256, compress="deflate") as dst:
            dst.write(rgb)
    return Sheet(path, tuple(truth))


def load_runtime(device: str = "cpu"):
    """The example backend: installed (entry point `dbtext`), else imported from examples/; None when
    rapidocr-onnxruntime (the network's wheel) is not installed."""
    try:
        import rapidocr_onnxruntime  # noqa: F401
    except ImportError:
        return None
    try:
        import sam3tiles_dbtext
    except ImportError:
        sys.path.insert(0, str(ROOT / "examples" / "sam3tiles-dbtext"))
        import sam3tiles_dbtext
    return sam3tiles_dbtext.DBTextRuntime(device=device)


def score(preds, truth) -> dict:
    """Precision, recall, F1 at IoU >= 0.3; duplicates and fragments (`sam3tiles.evaluate`)."""
    from sam3tiles.evaluate import evaluate_class

    r = evaluate_class([g for _, g in preds], list(truth), iou_min=IOU)
    return {k: r[k] for k in ("truth", "pred", "tp", "fp", "fn", "duplicates", "fragments")}


def run_sheet(sheet: Sheet, rt, methods=METHODS, sahi_ok: bool = True) -> dict:
    """{method: counts} for one sheet: every method gets the same per-tile answers of the network."""
    from .bench_merge_quality import floor_preds, merge_centre, merge_sahi, merge_sam3tiles, tile_pieces

    t0 = time.perf_counter()
    per_tile, frames, tiles, transform, shape = tile_pieces(sheet.path, None, runtime=rt, prompts=(PROMPT,))
    res: dict = {"tiles": len(tiles), "network_s": round(time.perf_counter() - t0, 2)}
    for m in methods:
        if m == "sam3tiles":
            preds, stats = merge_sam3tiles(per_tile, frames)
            res["violations"] = stats.rule_violations
        elif m.startswith("sahi"):
            if not sahi_ok:
                continue
            preds, _ = merge_sahi(per_tile, frames, transform, shape, kind=m.split("-")[1])
        elif m == "centre":
            preds, _ = merge_centre(per_tile, frames)
        else:
            sq, *_ = tile_pieces(sheet.path, None, squash=True, runtime=rt, prompts=(PROMPT,))
            preds = [(pr, g) for p in sq for g, pr in zip(p.geometry, p.prompt)]
        res[m] = score(preds, sheet.truth)
    res["floor"] = score(floor_preds(per_tile, frames, {0: list(sheet.truth)}, transform), sheet.truth)
    return res


def merge_traced(per_tile, frames):
    """The merge (`merge_pass`) with every part's fate traced: (preds, stats, trace); trace[i] lists the
    decisions on part i of `trace["_resolver"].c`, with the components `trace["_comp"]`."""
    from sam3tiles.merge import IOS_MIN, IOU_MIN
    from sam3tiles.merge.rules import merge_pass
    from sam3tiles.vectorize.pieces import Pieces

    trace: dict = {}
    part = merge_pass(Pieces.concat(per_tile), frames, IOU_MIN, IOS_MIN, trace=trace)
    return list(zip(part.merged.prompt, part.merged.geometry)), part.stats, trace


def _matched(preds, truth) -> dict:
    """{truth index: (pred index, IoU)} of the greedy one-to-one matching at IoU >= `IOU`."""
    from sam3tiles.evaluate import _match

    pg = np.asarray([g for _, g in preds], dtype=object)
    pairs, _ = _match(pg, np.asarray(truth, dtype=object), IOU)
    return {t: (p, v) for p, t, v in pairs}


def _iou(a, b) -> float:
    u = a.union(b).area
    return a.intersection(b).area / u if u else 0.0


def _bx(g) -> str:
    return "(%d %d %d %d)" % tuple(round(v) for v in g.bounds)


def lost_lines(per_tile, frames, truth) -> tuple[dict, list]:
    """Every line the floor keeps (matched at IoU >= `IOU`) that the merge lost, with the fate of each
    part lying on it (tile, complete, edge distance, owned, component, the rule that decided it)."""
    from .bench_merge_quality import floor_preds

    preds, stats, trace = merge_traced(per_tile, frames)
    floor = floor_preds(per_tile, frames, {0: list(truth)}, None)
    mm, fm = _matched(preds, truth), _matched(floor, truth)
    res = trace["_resolver"]
    c, comp = res.c, trace["_comp"]
    tree = shapely.STRtree(c.geoms)
    ptree = shapely.STRtree(np.asarray([g for _, g in preds], dtype=object))
    lost = []
    for t in sorted(set(fm) - set(mm)):
        tg = truth[t]
        item = {"truth": t, "box": _bx(tg), "floor_iou": round(fm[t][1], 3),
                "outputs": [(int(j), round(_iou(preds[j][1], tg), 3), _bx(preds[j][1]))
                            for j in ptree.query(tg, predicate="intersects").tolist()], "parts": []}
        for i in sorted(tree.query(tg, predicate="intersects").tolist()):
            g = c.geoms[i]
            if g.intersection(tg).area < 0.2 * g.area:
                continue
            tile = int(c.tiles[i])
            f = frames[tile]
            members = np.flatnonzero(comp == comp[i])
            item["parts"].append({
                "part": i, "tile": tile, "box": _bx(g), "iou": round(_iou(g, tg), 3),
                "complete": bool(c.complete[i]), "edge_px": round(float(c.edge[i]), 1),
                "inside": bool(res.inside[i]), "owned": bool(res.owned[i]),
                "own_core_frac": round(float(res.owned_area[i] / g.area), 2),
                "window": _bx(f.window), "core": _bx(f.core),
                "component": int(comp[i]), "members": [int(m) for m in members if m != i][:8],
                "fate": trace.get(i, ["(deferred)"])})
        lost.append(item)
    used = {p for p, _ in mm.values()}
    ttree = shapely.STRtree(np.asarray(truth, dtype=object))
    for j, (_, g) in enumerate(preds):
        if j in used:
            continue  # an extra object: a duplicate, a fragment or a false positive
        on = [(int(t), round(_iou(g, truth[t]), 3)) for t in ttree.query(g, predicate="intersects").tolist()]
        item = {"extra": j, "box": _bx(g), "on_truth": on, "parts": []}
        for i in sorted(tree.query(g, predicate="intersects").tolist()):
            if c.geoms[i].intersection(g).area < 0.5 * min(c.geoms[i].area, g.area):
                continue
            fate = trace.get(i, ["(deferred)"])
            if not any(f.startswith(("kept", "stitched", "rule 4 half")) for f in fate):
                continue
            tile = int(c.tiles[i])
            item["parts"].append({"part": i, "tile": tile, "box": _bx(c.geoms[i]), "complete": bool(c.complete[i]),
                                  "edge_px": round(float(c.edge[i]), 1), "owned": bool(res.owned[i]),
                                  "own_core_frac": round(float(res.owned_area[i] / c.geoms[i].area), 2),
                                  "core": _bx(frames[tile].core), "component": int(comp[i]),
                                  "members": [int(m) for m in np.flatnonzero(comp == comp[i]) if m != i][:8],
                                  "fate": fate})
        lost.append(item)
    gained = sorted(set(mm) - set(fm))
    return {"merge": score(preds, truth), "floor": score(floor, truth), "gained": gained,
            "stats": stats}, lost


def lines_sheet(sheet: Sheet, rt, seed: int, sahi_ok: bool, quiet: bool) -> dict:
    """One sheet for `--lines`: F1 of the merge, the floor and SAHI's GREEDYNMM, and the lines lost (printed
    as found unless `quiet`)."""
    from .bench_merge_quality import merge_sahi, tile_pieces

    per_tile, frames, _, transform, shape = tile_pieces(sheet.path, None, runtime=rt, prompts=(PROMPT,))
    got, lost = lost_lines(per_tile, frames, list(sheet.truth))
    res = {"seed": seed, "merge": got["merge"], "floor": got["floor"], "lost": lost,
           "dropped": {"duplicates": got["stats"].duplicates_dropped, "slivers": got["stats"].slivers_dropped},
           "violations": got["stats"].rule_violations}
    if sahi_ok:
        res["sahi-gnmm"] = score(merge_sahi(per_tile, frames, transform, shape, kind="gnmm")[0], sheet.truth)
    if not quiet:
        print(_lines_row(res))
        for item in lost:
            print("   ", _lost_words(item))
    return res


def _lines_row(r: dict) -> str:
    m, f = r["merge"], r["floor"]
    sahi = f"  SAHI GREEDYNMM F1 {_f1(r['sahi-gnmm']):.4f}" if "sahi-gnmm" in r else ""
    return (f"seed {r['seed']}: {m['truth']} lines; merge F1 {_f1(m):.4f} ({m['fn']} missed, {m['fp']} extra, "
            f"{m['duplicates']} dups, {m['fragments']} frags), floor F1 {_f1(f):.4f} ({f['fn']} missed){sahi}; "
            f"merge dropped {r['dropped']['duplicates']} duplicates, {r['dropped']['slivers']} slivers, "
            f"{len(r['lost'])} lost or extra")


def _lost_words(item: dict) -> str:
    """One lost line (or extra object) in a line: where, and each part's tile and fate."""
    parts = "; ".join(f"tile {p['tile']} {'whole' if p['complete'] else 'cut'} part {p['part']} {p['box']}: "
                      + ", ".join(p["fate"]) for p in item["parts"])
    if "truth" in item:
        return f"lost line {item['box']} (floor IoU {item['floor_iou']}; outputs over it {item['outputs']}): {parts}"
    return f"extra object {item['box']} on lines {item['on_truth']}: {parts}"


def _lines_report(results: list, args, rt, sahi_ok: bool) -> int:
    worst = min((_f1(r["merge"]) - _f1(r["floor"]) for r in results), default=0.0)
    out = {"size": args.size, "seeds": args.seeds, "network": rt.identity, "sahi": sahi_ok,
           "sheets": [{k: v for k, v in r.items() if k != "lost"} | {"lost": len(r["lost"])} for r in results],
           "worst_vs_floor": round(worst, 4)}
    if args.json:
        emit(out, True)
        return 0
    dups, frags = (sum(r["merge"][k] for r in results) for k in ("duplicates", "fragments"))
    print(f"merge F1 minus floor F1, worst sheet: {worst:+.4f}; duplicates {dups}, fragments {frags}")
    return 0


def _f1(c) -> float:
    d = 2 * c["tp"] + c["fp"] + c["fn"]
    return 2 * c["tp"] / d if d else 1.0


def summarise(results: list, methods) -> list:
    """[method, truth, pred, matched, precision, recall, F1, dups, frags] summed over sheets."""
    rows = []
    for m in [*methods, "floor"]:
        got = [r[m] for r in results if m in r]
        if not got:
            continue
        t = {k: sum(g[k] for g in got) for k in got[0]}
        prec = t["tp"] / t["pred"] if t["pred"] else 0.0
        rec = t["tp"] / t["truth"] if t["truth"] else 1.0
        rows.append([m, t["truth"], t["pred"], t["tp"], round(prec, 3), round(rec, 3), round(_f1(t), 3),
                     t["duplicates"], t["fragments"]])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, nargs=2, default=[8000, 6000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--sizes", type=int, nargs=2, default=[11, 26], help="text heights drawn, px (min max)")
    ap.add_argument("--density", type=float, default=1.0)
    ap.add_argument("--layout", choices=tuple(LAYOUTS), default="mixed",
                    help="mixed: lone words and paragraphs of 1-6 lines; page: paragraphs of 6-16 long lines")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--lines", action="store_true",
                    help="per sheet: the merge, the floor and SAHI's GREEDYNMM, and every line the floor keeps "
                         "that the merge lost (or an extra object it made), with the rule that decided each part")
    ap.add_argument("--smoke", action="store_true", help="one 1760 x 1000 sheet (two tiles), one seed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.size, args.seeds = [1760, 1000], [1]
    rt = load_runtime()
    if rt is None:
        print("rapidocr-onnxruntime is not installed (pip install rapidocr-onnxruntime): nothing measured")
        return 0
    try:
        import sahi  # noqa: F401
        sahi_ok = True
    except ImportError:
        sahi_ok = False
    results = []
    with tempfile.TemporaryDirectory() as d:
        for seed in args.seeds:
            sheet = make_sheet(Path(d) / f"sheet{seed}.tif", *args.size, seed=seed, sizes=tuple(args.sizes),
                               density=args.density, **LAYOUTS[args.layout])
            results.append(run_sheet(sheet, rt, args.methods, sahi_ok) if not args.lines
                           else lines_sheet(sheet, rt, seed, sahi_ok, args.json))
    if args.lines:
        return _lines_report(results, args, rt, sahi_ok)
    rows = summarise(results, args.methods)
    out = {"size": args.size, "seeds": args.seeds, "sizes": args.sizes, "density": args.density, "layout": args.layout,
           "network": rt.identity, "sahi": sahi_ok, "table": rows,
           "tiles": [r["tiles"] for r in results], "network_s": [r["network_s"] for r in results],
           "violations": sum(r.get("violations", 0) for r in results)}
    if args.json:
        emit(out, True)
        return 0
    print(f"== DB text detector ({rt.identity}), {args.size[0]}x{args.size[1]} sheets, text {args.sizes[0]}-"
          f"{args.sizes[1]} px, {args.layout} layout, density {args.density}, seeds {args.seeds}, IoU >= {IOU}")
    print(table(rows, ["method", "truth", "pred", "matched", "precision", "recall", "F1", "dups", "frags"]))
    print(f"tiles per sheet {out['tiles']}, network seconds {out['network_s']}, rule violations "
          f"{out['violations']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
