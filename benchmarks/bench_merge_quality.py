"""Merge quality against a misbehaving model: sam3tiles' merge beside SAHI, naive tiling and squashing.

    python -m benchmarks.bench_merge_quality [--size 3000 2500] [--seeds 1 2 3] [--behaviours all ...] [--smoke]
        [--onnx-n1] [--cap-refine 2000]

Generated scenes (`sam3tiles.testing.demo`: vehicles `red` of about 10 x 20 px, buildings `blue`, one field
larger than a tile `yellow`) are cut into the pipeline's tiles; the reference backend, wrapped by
`MisbehavingRuntime` with one behaviour of ../shared/model-behaviour.md (or all together), answers every
tile, and the SAME per-tile pieces go to each method:

* `sam3tiles`: `merge_pieces`;
* `sahi-gnmm` / `sahi-nms`: SAHI's own postprocess (`GreedyNMMPostprocess` with its defaults IOS 0.5, and
  `NMSPostprocess`, IOS 0.5, per category), on the pieces as SAHI `ObjectPrediction`s (needs `pip install
  sahi`, the `bench` extra; the columns are left out without it);
* `centre`: naive tiling, each piece kept by the tile whose core holds its box centre, no linking;
* `squash`: the whole image squashed into one model input (the published callers' baseline).

Per class, summed over seeds: F1 at IoU >= 0.5, duplicates and fragments, and the IoU of every object
larger than a tile with its best single prediction (mean and minimum).

`floor` is what the tiles' own outputs allow any merge that follows ownership (`floor_preds`): the owning
tile's copies of each object (a miss: one whole copy another tile saw), for an object cut in its owner the
union of every tile's view of it clipped to it, and the false positives the tiles reported (inside their
own cores, or whole where the owner said nothing). No merge beats it where the owner itself split, grew,
shrank or missed an object, or reported a false positive; where it is under 0.97 the tiles, not the
merge, set the limit:

* `grow`: a mask cell is 3.5 px at scale 1 and a vehicle about 200 px^2; the reference mask covers ~0.8 of
  it (IoU ~0.78), one cell of erosion leaves 0.2-0.4 of it (IoU 0.2-0.4 < 0.5): every shrunk vehicle is a
  miss and a false positive whatever the merge does (grown ones reach IoU ~0.57);
* `false_pos`: each tile's spurious blobs cost one false positive each; with one field per scene the
  field's F1 cannot reach 0.97;
* `cap` (20 per pass, so that it bites on these sparse scenes): objects past the cap are gone from the
  owner's answer; SAM 3's real cap is 200 and the pipeline refines tiles that reach it (`--cap-refine`).

`band oracle` is the issue-49 bar for boundary noise: the best any per-pixel vote over the tiles' views in
the overlap bands can do, the truth as the voter, and the owners' outline as drawn where one tile alone saw
an object (`band_oracle`). It does not move with the merge's smoothing.

`vs-floor` scores the merge's output against the floor's objects instead of the truth: what the merge
itself lost or added (F1 1.0: it kept exactly what the owning tiles said).

`--onnx-n1`: the ONNX contract graphs answering each prompt with one mask (N = 1), same path: union IoU
per class, beside the floor (every tile's pieces inside its own core). `--cap-refine SIZE`: SAM 3's 200 cap
through the whole pipeline on a dense scene, `--refine auto` against `off` (`run_cap_refine`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import shapely

from sam3tiles.merge.parts import IOS_MIN, JOIN_CELLS, LINK_CELLS, SLIVER_CELLS, regions
from sam3tiles.tiling.piecekey import tile_of
from sam3tiles.vectorize.pieces import MASK_CELL

from .common import emit, table

METHODS = ("sam3tiles", "sahi-gnmm", "sahi-nms", "centre", "squash")
PROMPTS = ("red", "blue", "yellow")


def tile_pieces(path, behaviour, squash: bool = False, runtime=None, overlap: int | None = None,
                prompts=PROMPTS):
    """(per-tile Pieces, frames, tiles, transform) of the scene at `path` answered by the misbehaving model
    (or by `runtime`, as it is), for `prompts` (piece prompt k = the k-th of them); `overlap`: the grid's
    overlap in tile px (None: the default)."""
    from sam3tiles.model.reference import ReferenceRuntime
    from sam3tiles.readers import open_source
    from sam3tiles.testing.misbehaving import MisbehavingRuntime
    from sam3tiles.tiling.frame import TileFrames
    from sam3tiles.tiling.grid import DEFAULT_OVERLAP, TileGrid, squash_tile
    from sam3tiles.vectorize.pieces import crop_detections, pieces_from_crops

    rt = runtime if runtime is not None else MisbehavingRuntime(ReferenceRuntime(), behaviour)
    prompts = [rt.prepare_prompt(p) for p in prompts]
    with open_source(path) as src:
        overlap = DEFAULT_OVERLAP if overlap is None else overlap
        grid = None if squash else TileGrid(src.width, src.height, transform=src.transform, overlap=overlap)
        tiles = [squash_tile(src.width, src.height, src.transform)] if grid is None else list(grid)
        out = []
        for tile in tiles:
            image = src.read_tile(tile)
            emb = rt.encode(image)
            holes = None if image.valid[: tile.valid_wh[1], : tile.valid_wh[0]].all() else image.valid
            crops = [c for k, p in enumerate(prompts)
                     for c in crop_detections(rt.decode(emb, p), k, 0, tile.valid_wh, holes)]
            out.append(pieces_from_crops(crops, tile))
        frames = dict(TileFrames(grid, {t.index: t for t in tiles}))
        return out, frames, tiles, src.transform, (src.height, src.width)


def merge_sam3tiles(per_tile, frames, **_):
    from sam3tiles.merge import merge_pieces
    from sam3tiles.vectorize.pieces import Pieces

    merged, stats = merge_pieces(Pieces.concat(per_tile), frames)
    return list(zip(merged.prompt, merged.geometry)), stats


def merge_centre(per_tile, frames, **_):
    out = []
    for p in per_tile:
        for g, k, pr in zip(p.geometry, p.tile_key, p.prompt):
            x0, y0, x1, y1 = g.bounds
            if frames[tile_of(k)].core.contains(shapely.Point((x0 + x1) / 2, (y0 + y1) / 2)):
                out.append((pr, g))
    return out, None


def merge_sahi(per_tile, frames, transform, shape, kind="gnmm", **_):
    from sahi.postprocess.combine import GreedyNMMPostprocess, NMSPostprocess
    from sahi.prediction import ObjectPrediction

    inv = ~transform
    to_px = [inv.a, inv.b, inv.d, inv.e, inv.c, inv.f]
    preds = []
    for p in per_tile:
        for g, pr, sc in zip(p.geometry, p.prompt, p.score):
            gp = shapely.affinity.affine_transform(g, to_px)
            rings = [np.asarray(poly.exterior.coords).ravel().tolist() for poly in shapely.get_parts(gp)
                     if poly.geom_type == "Polygon"]
            x0, y0, x1, y1 = gp.bounds
            preds.append(ObjectPrediction(bbox=[x0, y0, x1, y1], category_id=int(pr), segmentation=rings,
                                          score=float(sc), full_shape=list(shape)))
    post = (GreedyNMMPostprocess if kind == "gnmm" else NMSPostprocess)(
        match_threshold=0.5, match_metric="IOS", class_agnostic=False)
    to_crs = [transform.a, transform.b, transform.d, transform.e, transform.c, transform.f]
    out = []
    for op in post(preds):
        polys = [shapely.Polygon(np.asarray(r).reshape(-1, 2)) for r in op.mask.segmentation if len(r) >= 6]
        g = shapely.make_valid(shapely.MultiPolygon(polys) if len(polys) > 1 else polys[0])
        out.append((op.category.id, shapely.affinity.affine_transform(g, to_crs)))
    return out, None


def _large_ious(preds, truth) -> list[float]:
    """Per object larger than a tile: the IoU with its best single prediction."""
    out = []
    pg = np.asarray(preds, dtype=object)
    tree = shapely.STRtree(pg) if len(pg) else None
    for t in truth:
        hits = tree.query(t, predicate="intersects") if tree is not None else []
        out.append(max((t.intersection(pg[j]).area / t.union(pg[j]).area for j in hits), default=0.0))
    return out


def _owner(frames, t):
    """The tile owning truth object `t`: its core holds the centroid (cores overlap by a pixel: the one
    whose window holds most of `t`)."""
    c = t.centroid
    hits = [i for i, f in frames.items() if f.core.contains(c)]
    return max(hits, key=lambda i: frames[i].window.intersection(t).area, default=None)


def _centre_in_core(frame, q) -> bool:
    x0, y0, x1, y1 = q.bounds
    return frame.core.contains(shapely.Point((x0 + x1) / 2, (y0 + y1) / 2))


def floor_preds(per_tile, frames, truth_by_class, transform, by_owner: bool = False):
    """What the tiles' own outputs allow any merge that follows ownership (the merge's rules 4-5).

    `by_owner` False (`floor`): an object cut in its owner gets the union of every tile's views of it,
    clipped to the object: a bound no merge reaches where views differ (it would need the truth to clip
    a grown view and to pick the larger of two shrunk ones). `by_owner` True (`own-floor`): each tile's
    views of it inside that tile's core (the cores partition the image), the other tiles' views in the
    cores of tiles that said nothing of it, not clipped: what the tiles owning each area said.

    A mask's regions are those of the merge's rule 0 (regions within `JOIN_CELLS` mask cells are one: a
    tile that drew one region over two objects said one; only the truth could cut it).

    * An object whole in its owning tile (clear of the owner's interior edges by 10 px): the owner's
      copies (each mask's regions inside the object, as one copy: two halves stay two). None, but a
      region of the owner's covers half of it: the owner drew it into another object (fused), whose copy
      stands for it. None at all (a miss): one complete copy another tile saw (a merge keeps it: it
      cannot tell a miss from a false positive), else the other tiles' cut views as an object cut in its
      owner (stitching decides).
    * An object cut in its owner: `floor`: the union of every tile's regions of it, clipped to it (the
      area no tile covered cannot come out), with complete regions smaller than half of it lying (>= 0.8)
      inside it that their own tile owns (box centre in its core) as extra objects (a false positive
      inside a field: the merge keeps any owned part). `own-floor`: `_owned_objects`.
    * False positives: regions mostly outside every object that their own tile owns, or that no other
      tile reported as the merge would need to drop them (`_owner_said`).
    """
    out = []
    by_tile: dict = {}
    for p in per_tile:
        for g, k, pr, comp in zip(p.geometry, p.tile_key, p.prompt, p.complete):
            frame = frames[tile_of(k)]
            # a mask's regions as the merge's rule 0 sees them (those within JOIN_CELLS are one region):
            # where the tile drew one region over two objects, nothing but the truth could cut it
            regs = regions(g, JOIN_CELLS * MASK_CELL * frame.pixel)
            by_tile.setdefault((tile_of(k), pr), []).append((g, bool(comp), regs))
    out += _false_positives(by_tile, frames, truth_by_class)
    for k, truth in truth_by_class.items():
        for t in truth:
            owner = _owner(frames, t)
            f = frames.get(owner)
            clear = f is not None and (f.edges is None or t.distance(f.edges) > 10 * f.pixel)
            if clear and f.window.contains(t):
                copies = _copies(by_tile.get((owner, k), []), t)
                # no copy of its own, but a region of the owner's covers most of it: the owner drew it into
                # another object (fused), and that object's copy stands for it (as in the merge)
                fused = not copies and any(q.intersection(t).area >= 0.5 * t.area
                                           for _, _, regs in by_tile.get((owner, k), []) for q in regs)
                others = [] if copies or fused else sorted(i for i, kk in by_tile if kk == k and i != owner)
                for tile in others:
                    copies = _copies([v for v in by_tile[(tile, k)] if v[1]], t)[:1]
                    if copies:
                        break
                if copies or fused:
                    out += [(k, c) for c in copies]
                    continue
                # the owner missed it and no other tile saw it whole: the others' cut views, stitched (below)
            views = {tile: [(m, c) for m, c in (([q for q in regs if _mostly_in(q, t)], c)
                                                for _, c, regs in geoms) if m]
                     for (tile, kk), geoms in by_tile.items() if kk == k}
            views = {tile: v for tile, v in views.items() if v}
            if by_owner and views:
                out += [(k, r) for r in _owned_objects(views, frames, frames[next(iter(views))].pixel)]
            elif views:
                got = shapely.union_all([q for v in views.values() for m, _ in v for q in m]).intersection(t)
                if got.area > 0:
                    out.append((k, got))
            if by_owner:
                continue  # a tile's complete mask inside the object: an object of its own above
            out += [(k, q) for (tile, kk), geoms in by_tile.items() if kk == k for _, c, regs in geoms if c
                    for q in regs if q.area < 0.5 * t.area and
                    q.intersection(t).area >= 0.8 * q.area and _centre_in_core(frames[tile], q)]
    return out


def _false_positives(by_tile, frames, truth_by_class) -> list:
    """The floor's false positives: regions mostly inside no object of their prompt that their own
    tile owns (box centre in its core) or that no other tile reported where they are (`_owner_said`)."""
    out = []
    trees = {k: (shapely.STRtree(ts), ts) for k, ts in truth_by_class.items() if len(ts)}
    for (tile, k), geoms in by_tile.items():
        tree, ts = trees.get(k, (None, []))
        for _, comp, regs in geoms:
            for q in regs:
                if tree is not None and any(_mostly_in(q, ts[i]) for i in tree.query(q).tolist()):
                    continue  # a view of an object (one straddling two is neither's)
                if _centre_in_core(frames[tile], q) or not _owner_said(by_tile, frames, tile, k, q, comp):
                    out.append((k, q))
    return out


def _owned_objects(views: dict, frames, pixel: float) -> list:
    """`own-floor`'s objects for an object cut in its owner (or missed by it), from `views` {tile: [(the
    regions of one of its masks inside the object, complete)]}: what the tile owning each area said there.

    * A complete mask whose box centre lies in its tile's core is an object of its own, whole (the merge's
      rule 4: the owner's whole view stands); views lying (>= 0.8) under those are its copies.
    * Every other mask: its area inside its tile's core, with what it reaches into the cores of tiles that
      said nothing of it. Those of different tiles that meet (within the merge's `JOIN_CELLS` mask cells:
      they meet across a core boundary) are one object; two of ONE tile never join (in its core the tile
      said two, as the floor keeps an owner's two halves of a whole object as two).
    Each object's regions no tile connects stay apart."""
    gap = JOIN_CELLS * MASK_CELL * pixel
    said = shapely.union_all([frames[tile].core for tile in views])
    masks = [(tile, shapely.union_all(parts), c) for tile, ms in views.items() for parts, c in ms]
    owned = [c and _centre_in_core(frames[tile], m) for tile, m, c in masks]
    whole = [m for (_, m, _), o in zip(masks, owned) if o]
    units = [(tile, shapely.union_all([m.intersection(frames[tile].core), m.difference(said)]))
             for (tile, m, _), o in zip(masks, owned) if not o]
    if whole:
        cover = shapely.union_all(whole).buffer(gap)
        units = [(t, m) for t, m in units if m.intersection(cover).area < 0.8 * m.area]
    if not units:
        return whole
    geoms = np.asarray([m for _, m in units], dtype=object)
    tiles = np.asarray([t for t, _ in units])
    a, b = shapely.STRtree(geoms).query(geoms, predicate="dwithin", distance=gap)
    keep = tiles[a] != tiles[b]  # two of one tile never join directly
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(units)
    _, label = connected_components(coo_matrix((np.ones(int(keep.sum()), np.int8), (a[keep], b[keep])),
                                               shape=(n, n)), directed=False)
    joined = [r for lab in np.unique(label).tolist()
              for r in regions(shapely.union_all(geoms[label == lab]), gap) if r.area > 0]
    return whole + joined


def _copies(geoms, t) -> list:
    """Each mask's regions inside `t` (at least half of the region's area), as one copy per mask."""
    out = []
    for _, _, regs in geoms:
        parts = [q for q in regs if _mostly_in(q, t)]
        if parts:
            out.append(shapely.union_all(parts))
    return out


def _mostly_in(q, t) -> bool:
    return q.intersects(t) and q.intersection(t).area >= 0.5 * q.area


def _owner_said(by_tile, frames, tile, k, q, complete: bool) -> bool:
    """Whether another tile reported prompt `k` where `q` (outside its own tile's core) is. A cut region:
    a mask of another tile within `SLIVER_CELLS` mask cells (the merge's rule 6 drops a cut part outside its
    core beside another object). A complete one: masks of the tile owning its box centre that cover
    `IOS_MIN` of it within `LINK_CELLS` mask cells (as rule 2 links two views; a mask that only overlaps its
    edge is another object, and a merge keeps `q` as it keeps a copy the owner missed)."""
    if not complete:
        tol = SLIVER_CELLS * MASK_CELL * frames[tile].pixel
        return any(g.distance(q) <= tol for (i, kk), geoms in by_tile.items() if kk == k and i != tile
                   for g, *_ in geoms)
    x0, y0, x1, y1 = q.bounds
    c = shapely.Point((x0 + x1) / 2, (y0 + y1) / 2)
    owners = [i for i, f in frames.items() if i != tile and f.core.contains(c)]
    near = [g for i in owners for g, *_ in by_tile.get((i, k), []) if g.intersects(q)]
    if not near:
        return False
    tol = LINK_CELLS * MASK_CELL * frames[tile].pixel
    return shapely.union_all(near).buffer(tol).intersection(q).area >= IOS_MIN * q.area


def score(preds, truth_by_class, tile_extent: float) -> dict:
    from sam3tiles.evaluate import evaluate_class

    out = {}
    for k, truth in truth_by_class.items():
        mine = [g for c, g in preds if c == k]
        r = evaluate_class(mine, truth)
        big = [t for t in truth if max(t.bounds[2] - t.bounds[0], t.bounds[3] - t.bounds[1]) > tile_extent]
        out[PROMPTS[k]] = {"tp": r["tp"], "fp": r["fp"], "fn": r["fn"], "duplicates": r["duplicates"],
                           "fragments": r["fragments"], "large_iou": _large_ious(mine, big)}
    return out


def run_scene(path, truth, behaviour: str, methods, sahi_ok: bool, overlap: int | None = None) -> dict:
    """{method: {class: counts}} for one scene and one behaviour."""
    per_tile, frames, tiles, transform, shape = tile_pieces(path, behaviour, overlap=overlap)
    truth_by_class = {k: list(truth.geometry[truth["class"] == c]) for k, c in enumerate(PROMPTS)}
    extent = tiles[0].size * abs(transform.a)
    res, seconds = {}, {}
    for m in methods:
        t0 = time.perf_counter()
        if m == "sam3tiles":
            preds, stats = merge_sam3tiles(per_tile, frames)
            mine = preds
            res["coverage"] = stats.as_dict()["coverage"]
            res["violations"] = stats.rule_violations
        elif m.startswith("sahi"):
            if not sahi_ok:
                continue
            preds, _ = merge_sahi(per_tile, frames, transform, shape, kind=m.split("-")[1])
        elif m == "centre":
            preds, _ = merge_centre(per_tile, frames)
        else:
            sq, sframes, *_ = tile_pieces(path, behaviour, squash=True)
            preds = [(pr, g) for p in sq for g, pr in zip(p.geometry, p.prompt)]
        seconds[m] = time.perf_counter() - t0
        res[m] = score(preds, truth_by_class, extent)
    floor = floor_preds(per_tile, frames, truth_by_class, transform)
    res["floor"] = score(floor, truth_by_class, extent)
    res["own-floor"] = score(floor_preds(per_tile, frames, truth_by_class, transform, by_owner=True),
                             truth_by_class, extent)
    if "sam3tiles" in methods:  # the merge against what the tiles allow: what it lost or added itself
        res["band oracle"] = score(band_oracle(per_tile, frames, truth_by_class, extent), truth_by_class, extent)
        res["vs-floor"] = score(mine, {k: [g for c, g in floor if c == k] for k in truth_by_class}, np.inf)
    res["seconds"] = seconds
    return res


def merge_voted(per_tile, frames) -> list:
    """The merge's objects as a merge that votes only in the overlap bands would draw them outside the bands:
    `merge_pieces` with rule 5's smoothing off (the owners' stitch as the tiles drew it, where one tile
    alone saw it). What `band_oracle` starts from: with the smoothed outline it would count the smoothing's
    gains outside the bands, which no vote makes, and move with the merge it is a bar for."""
    from unittest import mock

    from sam3tiles.merge import rules

    with mock.patch.object(rules, "smooth_views", lambda geom, *_, **__: (geom, 0.0)):
        return merge_sam3tiles(per_tile, frames)[0]


def band_oracle(per_tile, frames, truth_by_class, tile_extent: float) -> list:
    """`band oracle`: the merge's objects (`merge_voted`) with, for each object larger than a tile, the pixels
    inside the overlap bands of the tiles that saw it replaced by the union of their views there clipped to
    the object: the best any per-pixel vote over the views in the bands can do (the truth as the voter).
    Elsewhere (what one tile alone saw) the owners' outline stays. The object's merged copy is the
    prediction of highest IoU with it; one copy standing for two objects (fused) gives each its own."""
    merged = merge_voted(per_tile, frames)
    views: dict = {}
    for p in per_tile:
        for g, tk, pr in zip(p.geometry, p.tile_key, p.prompt):
            views.setdefault(int(pr), []).append((tile_of(int(tk)), g))
    out = list(merged)
    taken: dict = {}
    for k, truth in truth_by_class.items():
        mine = [(i, g) for i, (c, g) in enumerate(merged) if c == k]
        if not mine:
            continue
        tree = shapely.STRtree(np.asarray([g for _, g in views.get(k, [])], dtype=object))
        for t in truth:
            if max(t.bounds[2] - t.bounds[0], t.bounds[3] - t.bounds[1]) <= tile_extent:
                continue
            i, m = max(mine, key=lambda x: x[1].intersection(t).area / x[1].union(t).area)
            if m.intersection(t).area <= 0:
                continue
            seen = [views[k][j] for j in tree.query(t, predicate="intersects").tolist()]
            wins = {tile: frames[tile].window for tile, _ in seen}
            band = shapely.union_all([wins[a].intersection(wins[b]) for a in wins for b in wins if a < b])
            said = shapely.union_all([g for _, g in seen]).intersection(band).intersection(t)
            taken.setdefault(i, []).append(shapely.union_all([m.difference(band), said]))
    return [x for i, x in enumerate(out) if i not in taken] + [(merged[i][0], g) for i, gs in taken.items()
                                                                for g in gs]


def union_ious(per_tile, frames, merged, truth_by_class) -> dict:
    """Per class: union IoU of the merge's output with the truth, and of the floor (every tile's pieces
    inside its own core, the cores partition the image: what the tiles said is object)."""
    out = {}
    for k, truth in truth_by_class.items():
        t = shapely.union_all(truth)
        said = [shapely.intersection(g, frames[tile_of(int(tk))].core) for p in per_tile
                for g, tk, pr in zip(p.geometry, p.tile_key, p.prompt) if pr == k]
        floor = shapely.union_all(said) if said else shapely.Polygon()
        got = shapely.union_all([g for c, g in merged if c == k])
        out[PROMPTS[k]] = {n: round(float(g.intersection(t).area / g.union(t).area), 3) if not g.is_empty
                           else 0.0 for n, g in (("sam3tiles", got), ("floor", floor))}
    return out


def run_onnx_n1(size, seeds) -> list:
    """The contract graphs answering each prompt with ONE mask (grid 1: N <= 1 per tile and prompt)
    through the same per-tile path and the merge: union IoU per class and seed."""
    from sam3tiles.model.onnx import OnnxRuntime
    from sam3tiles.testing.demo import write_scene
    from sam3tiles.testing.graphs import build_contract_models

    rows = []
    with tempfile.TemporaryDirectory() as d:
        rt = OnnxRuntime(build_contract_models(Path(d) / "model", decoder="colour", grid=1), device="cpu")
        for seed in seeds:
            scene = write_scene(Path(d) / f"n1_{seed}.tif", *size, seed=seed)
            per_tile, frames, *_ = tile_pieces(scene.path, None, runtime=rt)
            merged, _ = merge_sam3tiles(per_tile, frames)
            truth = {k: list(scene.truth.geometry[scene.truth["class"] == c]) for k, c in enumerate(PROMPTS)}
            for cls, v in union_ious(per_tile, frames, merged, truth).items():
                rows.append([seed, cls, v["sam3tiles"], v["floor"]])
    return rows


def run_cap_refine(size: int, seeds, behaviours=("cap=200", "all"), overlap: int | None = None) -> list:
    """The 200-object cap through the whole pipeline: `bench_refine`'s uniformly dense scene (about 300
    vehicles per tile), the misbehaving model at SAM 3's real cap, `--refine auto` (tiles that hit the cap
    re-run zoomed in, issue 11) against `--refine off`. The per-tile tables above cannot show this: they
    feed one grid's answers to the merge, and their `cap` preset (20) lies under the pipeline's
    saturation threshold (95% of 200), so no refinement could see it."""
    import functools

    from sam3tiles.evaluate import evaluate
    from sam3tiles.model.reference import ReferenceRuntime
    from sam3tiles.run.pipeline import segment_job
    from sam3tiles.testing.misbehaving import MisbehavingRuntime

    from .bench_refine import make_scene

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for seed in seeds:
            scene = make_scene(Path(d), "uniform", size, seed)
            for b in behaviours:
                for refine in ("auto", "off"):
                    backend = functools.partial(MisbehavingRuntime, ReferenceRuntime(), b)
                    extra = {} if overlap is None else {"overlap": overlap}
                    gdf, rep = segment_job(str(scene.path), ["red"], checkpoint=False, workers=1,
                                           refine=refine, backend=backend, **extra)
                    f1 = round(float(evaluate(gdf, scene.truth).iloc[0].f1), 3)
                    rows.append([seed, b, refine, len(scene.truth), f1, rep.tiles, rep.saturated])
    return rows


def scene_objects(kind: str, width: int, height: int, seed: int):
    """The objects of a `--scene` (None: the demo layout)."""
    from .synthetic import hard_objects, long_objects, tessellation

    if kind == "long":
        return long_objects(width, height, seed=seed)
    if kind == "hard":
        return hard_objects(width, height, seed=seed)
    if kind == "tessellation":
        rng = np.random.default_rng(seed)
        return [("blue", p) for p in tessellation(8, 8, width - 8, height - 8, rng)]
    return None


#: The faults `--behaviours pairs` combines two at a time (each with its preset's rate).
PAIRED = ("miss", "false_pos", "split", "fused", "multipart", "grow", "short", "edge_score", "score_jitter")


def pairs() -> list[str]:
    return [f"{a}+{b}" for i, a in enumerate(PAIRED) for b in PAIRED[i + 1:]]


def _f1(c) -> float:
    d = 2 * c["tp"] + c["fp"] + c["fn"]
    return 2 * c["tp"] / d if d else 1.0


def summarise(results: dict, methods) -> dict:
    """{class: [(behaviour, method, f1, dups, frags, large mean, large min, worst)]} summed over seeds;
    `worst` (sam3tiles rows): the largest per-object IoU shortfall under the own-floor."""
    rows: dict = {}
    for beh, per_seed in results.items():
        for m in [*methods, "band oracle", "own-floor", "floor", "vs-floor"]:
            for cls in PROMPTS:
                got = [r[m][cls] for r in per_seed if m in r]
                if not got:
                    continue
                tot = {k: sum(g[k] for g in got) for k in ("tp", "fp", "fn", "duplicates", "fragments")}
                big = [v for g in got for v in g["large_iou"]]
                rows.setdefault(cls, []).append(
                    (beh, m, round(_f1(tot), 3), tot["duplicates"], tot["fragments"],
                     round(float(np.mean(big)), 3) if big else None, round(float(min(big)), 3) if big else None,
                     _worst(per_seed, cls) if m == "sam3tiles" and big else None))
    return rows


def _worst(per_seed, cls):
    """The floor per object: the largest shortfall of the merge's IoU under the own-floor's, over the
    objects larger than a tile (the same objects, in truth order, in both)."""
    gaps = [o - s for r in per_seed if "own-floor" in r
            for s, o in zip(r["sam3tiles"][cls]["large_iou"], r["own-floor"][cls]["large_iou"])]
    return round(float(max(gaps)), 3) if gaps else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, nargs=2, default=[3000, 2500])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--behaviours", nargs="+", default=None,
                    help="presets of sam3tiles.testing.misbehaving, combined with '+' ('grow+miss'); "
                         "'pairs': every pair of the faults in PAIRED")
    ap.add_argument("--scene", choices=("demo", "hard", "tessellation", "long"), default="demo",
                    help="demo: vehicles, buildings, a field; hard: fields across 4+ tiles, a tessellation of "
                         "parcels 8 px apart, long thin objects (benchmarks.synthetic.hard_objects); "
                         "tessellation: the whole scene tiled by `blue` parcels of 150-600 px, 8 px apart; "
                         "long: rivers, roads and field strips longer than a tile (benchmarks.synthetic.long_objects)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--smoke", action="store_true", help="one small scene, one seed, reference and semantic")
    ap.add_argument("--onnx-n1", action="store_true",
                    help="also the ONNX contract graphs with one mask per prompt")
    ap.add_argument("--cap-refine", type=int, default=0, metavar="SIZE",
                    help="also the 200 cap through the pipeline, --refine auto/off, SIZE x SIZE dense scene")
    ap.add_argument("--overlap", type=int, default=None,
                    help="the grid's overlap in tile px (default: the pipeline's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.size, args.seeds, args.behaviours = [1800, 1500], [1], ["reference", "semantic"]
    from sam3tiles.testing.demo import write_scene
    from sam3tiles.testing.misbehaving import BEHAVIOURS


    try:
        import sahi  # noqa: F401
        sahi_ok = True
    except ImportError:
        sahi_ok = False
    behaviours = [x for b in (args.behaviours or list(BEHAVIOURS)) for x in (pairs() if b == "pairs" else [b])]
    results: dict = {b: [] for b in behaviours}
    with tempfile.TemporaryDirectory() as d:
        for seed in args.seeds:
            objects = scene_objects(args.scene, *args.size, seed)
            scene = write_scene(Path(d) / f"s{seed}.tif", *args.size, seed=seed, objects=objects)
            for b in behaviours:
                results[b].append(run_scene(scene.path, scene.truth, b, args.methods, sahi_ok, args.overlap))
    rows = summarise(results, args.methods)
    out = {"size": args.size, "seeds": args.seeds, "sahi": sahi_ok, "overlap": args.overlap, "tables": rows,
           "violations": {b: sum(r.get("violations", 0) for r in v) for b, v in results.items()},
           "coverage": {b: [r.get("coverage") for r in v] for b, v in results.items()},
           "merge_seconds": {b: round(sum(r["seconds"].get("sam3tiles", 0.0) for r in v), 3)
                             for b, v in results.items()}}
    if args.onnx_n1:
        out["onnx_n1"] = run_onnx_n1(args.size, args.seeds)
    if args.cap_refine:
        out["cap_refine"] = run_cap_refine(args.cap_refine, args.seeds, overlap=args.overlap)
    if args.json:
        emit(out, True)
        return 0
    for cls, r in rows.items():
        print(f"\n== {cls} ({args.size[0]}x{args.size[1]}, seeds {args.seeds})")
        print(table([list(x) for x in r], ["behaviour", "method", "F1", "dups", "frags", "large IoU", "min",
                                                  "worst vs own-floor"]))
    print("\nrule violations (sam3tiles):", out["violations"])
    print("merge seconds (sam3tiles, all seeds):", out["merge_seconds"])
    if args.onnx_n1:
        print("\n== ONNX contract graphs, one mask per prompt (N = 1): union IoU with the truth")
        print(table(out["onnx_n1"], ["seed", "class", "sam3tiles", "floor"]))
    if args.cap_refine:
        print(f"\n== SAM 3's 200 cap through the pipeline ({args.cap_refine} px dense scene, vehicles F1)")
        print(table(out["cap_refine"], ["seed", "behaviour", "refine", "truth", "F1", "tiles", "saturated"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
