"""Points as prompts, one input: each positive point's object, whole, from the tiles it needs (issue 41).

Where a point runs: in the grid tile whose core holds it (its *home*), not in a window centred on it. Why:

* points share encodes: every point at home in a tile is decoded on that tile's one encode (a tree inventory
  or nuclei centroids put hundreds in a tile); a window of its own per point costs an encode each;
* a core lies at least overlap/2 (128 px at the default overlap) from every window edge that borders another
  tile, so the model sees the click with that much context on every side, and an object that stays inside
  the window comes out whole from that one decode (its mask reaches no inner edge: `complete`);
* an object that reaches past the window (cut: its mask touches an inner edge) is *followed*: each tile whose
  core the object reaches is run with one click on the object's part in that core (the point of that part
  farthest inside it) and every negative point of that window; the object is the union of each visited
  tile's answer inside that tile's own core. The cores partition the image, so the parts join without overlap
  whatever the object's size: objects across seams and larger than a tile are stitched from tiles, each
  trusted in its core, as the tiles' answers to a text prompt are. A window centred on the point would see
  ~504 px around it instead of >= 128 px, but an object larger than that needs following anyway.

Not found: a home answer with no mask (`nothing`), or one covering more than `BACKGROUND_SHARE` of the home
tile's window (`background`: the point decoder answers a click on background with most of the window, 71% of
the image at predicted IoU 0.945 in the write-up). Such a point gets its row (`found` false, no geometry) and
is counted in the report, never written as an object. An object covering more than half a tile's window (a
field) answers like background at home, so such a point is asked again zoomed out (`ZOOM_OUT_DEPTH`: a
window of the tile's side centred on it at half the zoom, then a quarter, one encode each): where its mask
closes inside that window (reaches no inner edge and at most two of its sides) under the share, the object
is followed at full resolution from the tiles it crosses; a click on background fills every window and stays
`background`. A point whose tile failed is
`failed` (exit 5, as failed tiles are); an object still growing after `MAX_TILES` tiles is `partial`.

Point runs are checkpointed as tile runs are (`run.recording.pointstore`: each task's answers, keyed by its window and
asks): a run killed part way, run again, recomputes only the tasks it had not stored and writes the same rows.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import geopandas as gpd
import numpy as np
import shapely
from affine import Affine
from shapely.geometry import Polygon
from shapely.ops import polylabel

from ...errors import ModelError, TilesFailedError, shippable
from ...merge import MergeStats
from ...model.registry import RuntimeSpec, get_runtime
from ...model.runtime import MASK_SIZE, MODEL_SIZE, Click, clicks_problem
from ...prompts.points import ZOOM_OUT_DEPTH, GeoPoint
from ...readers.mosaic import Ownership, layout_of
from ...readers.remote import source_name
from ...tiling.grid import Tile
from ...units import add_areas, length_to_crs
from ...vectorize.pieces import crop_detections, pieces_from_crops
from ...wording import opt
from ...writers.stream import ObjectSpool, SpoolInput
from ..planning.plan import InputPlan, RunPlan
from ..recording.checkpoint import TileStore
from ..recording.pointstore import PointStore, point_key
from ..recording.report import RunReport
from .engine import settled
from .runner import InputResult
from .submit import short_error
from .tasks import MODEL_LOCK, SourceSpec, read_task

log = logging.getLogger(__name__)

#: A home answer covering more than this share of the home tile's window (its valid cells) is background.
BACKGROUND_SHARE = 0.5
#: Tiles one object may be assembled from; one still growing past them is written as `partial`.
MAX_TILES = 64
#: The `prompt` column of point rows.
LABEL = "point"


@dataclass
class _Object:
    """One positive point's object as it is found: its home tile, each visited tile's answer, its state."""

    index: int  # the point's place among the run's points (its row order; point_id - 1)
    point: GeoPoint
    home: int
    status: str = "pending"  # found | nothing | background | failed | partial (| pending, zoom, following)
    score: float = 0.0
    parts: dict = field(default_factory=dict)  # tile index -> the object's mask there (CRS) or None
    geometry: object = None
    hint: object = None  # the whole object as a zoomed-out window saw it (CRS), coarse: where to follow it
    zoom: int = 0  # the zoom-outs it took to see it whole (0: none)


@shippable
def _clicks_check(spec: RuntimeSpec) -> str | None:
    return clicks_problem(get_runtime(spec))


#: Asks a point task decodes per call of the backend: their 288 x 288 answers are cropped before the next
#: chunk, so a tile of thousands of points holds this many full masks at most.
DECODE_CHUNK = 64


def _decode_asks(runtime, emb, asks: list) -> list:
    """Each ask's answer on one embedding: through the backend's `decode_clicks_many` where it has one (the
    shared inputs prepared once), else one `decode_clicks` an ask."""
    many = getattr(runtime, "decode_clicks_many", None)
    if callable(many):
        return list(many(emb, [c for _, c in asks]))
    return [runtime.decode_clicks(emb, c) for _, c in asks]


@shippable
def point_tile_task(src: SourceSpec, spec: RuntimeSpec, tile: Tile, asks: list, edge_margin: int) -> tuple[list, dict]:
    """Read the tile, encode it once, decode its asks' clicks in chunks, vectorize all answers in one pass: per
    ask (object index, its mask in the CRS or None, score, complete, share of the window's valid cells); and
    the seconds per stage."""
    image, read_s = read_task(src, tile)
    seconds = {"read": read_s, "encode": 0.0, "decode": 0.0, "vectorize": 0.0}
    if image is None:  # every pixel nodata
        return [(i, None, 0.0, True, 0.0) for i, _ in asks], seconds
    runtime = get_runtime(spec)
    vw, vh = tile.valid_wh
    rows, cols = -(-vh * MASK_SIZE // MODEL_SIZE), -(-vw * MASK_SIZE // MODEL_SIZE)
    holes = None if image.valid[:vh, :vw].all() else image.valid
    crops, shares = [], []
    with MODEL_LOCK:
        t0 = time.perf_counter()
        emb = runtime.encode(image, clicks=True)
        seconds["encode"] = time.perf_counter() - t0
        for k in range(0, len(asks), DECODE_CHUNK):
            t0 = time.perf_counter()
            dets = _decode_asks(runtime, emb, asks[k:k + DECODE_CHUNK])
            t1 = time.perf_counter()
            for j, det in enumerate(dets, start=k):  # each answer cropped at once: its mask is dropped
                crops += crop_detections(det, j, 0, tile.valid_wh, holes)
                shares.append(float((det.masks[0, 0, :rows, :cols] > 0.5).sum()) / (rows * cols) if len(det) else 0.0)
            del dets
            seconds["decode"] += t1 - t0
            seconds["vectorize"] += time.perf_counter() - t1
        del emb
    t0 = time.perf_counter()
    pieces = pieces_from_crops(crops, tile, edge_margin)  # all the tile's answers in one pass
    got = {p: (g, s, c) for p, g, s, c in zip(pieces.prompt, pieces.geometry, pieces.score, pieces.complete)}
    out = []
    for j, (i, _) in enumerate(asks):
        g, score, complete = got.get(j, (None, 0.0, True))
        out.append((i, g, float(score), bool(complete), shares[j] if g is not None else 0.0))
    seconds["vectorize"] += time.perf_counter() - t0
    return out, seconds


class PointRun:
    """The points of one planned input (those it holds first among the inputs): their objects to `spool`."""

    def __init__(self, engine, plan: RunPlan, inp: InputPlan, input_index: int, report: RunReport,
                 spool: ObjectSpool, store: TileStore | None = None):
        self.engine, self.plan, self.inp, self.report, self.spool = engine, plan, inp, report, spool
        self.ckpt = PointStore(store)
        self.input_index, self.opts, self.spec = input_index, plan.options, plan.spec
        self.source = SourceSpec(inp.path, inp.bands, inp.stretch, inp.identity)
        self.grid = inp.grid
        self.to_crs = inp.transform @ Affine.scale(1 / self.grid.scale)  # grid pixels -> CRS
        self.stats = {"encodes": 0, "home_tiles": 0, "follow_encodes": 0, "zoom_encodes": 0, "zoomed": 0}

    def run(self) -> InputResult:
        index = self.spool.begin_input(SpoolInput(source_name(self.inp.path), self.inp.crs.to_wkt()
                                                  if self.inp.crs else None, self.inp.frame))
        self._check_clicks()
        objects = self._objects()
        negatives = [p for p, o in zip(self.plan.points.points, self.plan.points.owner)
                     if not p.positive and o == self.input_index]
        self.neg_px = [~self.inp.transform @ (p.x, p.y) for p in negatives]
        work: dict[int, list] = {}
        for obj in objects:
            work.setdefault(obj.home, []).append((obj.index, self._tile_px(obj.home, obj.point.x, obj.point.y)))
        self.stats["home_tiles"] = len(work)
        first = True
        while work:
            self._take(objects, work, self._round(work), home=first)
            if first:
                self._zoom_out(objects)
            first = False
            work = self._follow(objects)
        self.stats["follow_encodes"] = self.stats["encodes"] - self.stats["home_tiles"] - self.stats["zoom_encodes"]
        for obj in objects:
            if obj.status in ("following", "partial"):
                obj.geometry = self._assemble(obj)
                obj.status = "found" if obj.status == "following" else obj.status
        self.spool.add(index, self._rows(objects))
        self._account(objects)
        return InputResult(self.inp.path, index, MergeStats(), self.inp.frame)

    # -- before ---------------------------------------------------------------------------------------------

    def _check_clicks(self) -> None:
        """The backend answers clicks (the ONNX one: its point decoder loads and fits), on a model worker."""
        fut = self.engine.client.submit(_clicks_check, self.spec, pure=False, resources=self.engine.model_resources())
        try:
            problem = fut.result()
        finally:
            fut.release()
        if problem is not None:
            raise ModelError(problem)

    def _objects(self) -> list[_Object]:
        pts = self.plan.points
        out = []
        for k, (p, owner) in enumerate(zip(pts.points, pts.owner)):
            if p.positive and owner == self.input_index:
                x, y = ~self.inp.transform @ (p.x, p.y)
                out.append(_Object(k, p, self.grid.tile_at(x, y).index))
        return out

    def _tile(self, index: int) -> Tile:
        return self.grid.tile(*divmod(index, self.grid.shape[1]))

    def _tile_px(self, index: int, x: float, y: float) -> tuple[float, float]:
        """A CRS point in a tile's pixels (the model-input frame)."""
        u, v = ~self._tile(index).transform @ (x, y)
        return (float(u), float(v))

    def _negatives(self, tile: Tile) -> tuple[Click, ...]:
        """Every negative point in the tile's window, as clicks in its pixels (once a window: all its asks
        share them)."""
        vw, vh = tile.valid_wh
        sx, sy = tile.scale_xy
        negs = [((x * sx - tile.x0), (y * sy - tile.y0)) for x, y in self.neg_px]
        return tuple(Click(xy, False) for xy in negs if 0 <= xy[0] < vw and 0 <= xy[1] < vh)

    # -- during ---------------------------------------------------------------------------------------------

    def _round(self, work: dict[int, list], tiles: dict[int, Tile] | None = None) -> dict[int, list | None]:
        """One task a tile (read, one encode, a decode per ask); None for a tile that failed. `tiles`: the
        windows of keys that are no grid tile (zoomed-out windows)."""
        from distributed import as_completed

        client, retries = self.engine.client, self.opts.retries
        futs, out = {}, {}
        for t, asks in work.items():
            tile = tiles[t] if tiles is not None else self._tile(t)
            negs = self._negatives(tile)  # one positive click an ask, with every negative point of the window
            clicked = [(i, (Click(at), *negs)) for i, at in asks]
            key = point_key(self._key_base(tile), tile, clicked)
            out[t] = self.ckpt.get(key, clicked)  # stored by an earlier run of the same command
            if out[t] is not None:
                continue
            fut = client.submit(point_tile_task, self.source, self.spec, tile, clicked, self.opts.edge_margin,
                                pure=False, retries=retries, resources=self.engine.model_resources())
            futs[fut.key] = (t, fut, tile, key)
        reused = len(work) - len(futs)
        ac = as_completed([f for _, f, _, _ in futs.values()], loop=client.loop)
        for fut in ac:
            if not settled(fut):  # lost with its worker after it finished: computed again
                ac.add(fut)
                continue
            t, _, tile, key = futs[fut.key]
            if fut.status == "finished":
                out[t], seconds = fut.result()
                for k, v in seconds.items():
                    self.report.seconds[k] = self.report.seconds.get(k, 0.0) + v
                self.ckpt.put(key, tile, out[t], seconds)
            else:
                out[t] = None
                self._failed(tile, fut.exception())
            fut.release()
        self.stats["encodes"] += len(work)
        self.report.tiles += len(work)
        self.report.resumed += reused
        self.report.done += sum(v is not None for v in out.values()) - reused
        return out

    def _key_base(self, tile: Tile) -> dict:
        """What decides a point task's answers besides its window and asks (`pointstore.point_key`)."""
        return {"source": self.inp.identity_at(tile.src_window), "model": self.plan.model_identity,
                "edge_margin": self.opts.edge_margin, "stretch": str(self.source.stretch), "bands": self.source.bands}

    def _failed(self, tile: Tile, exc: BaseException | None) -> None:
        if isinstance(exc, (ModelError, MemoryError)):
            raise exc
        if self.opts.strict:
            raise TilesFailedError(f"tile {tile.index} (row {tile.row}, col {tile.col}) of {self.inp.path} failed "
                                   f"after {self.opts.retries} retries: {short_error(exc)}. {opt('strict')} stops "
                                   "the run there")
        self.report.failed += 1
        self.report.failed_tiles.append({"source": self.inp.path, "tile": tile.index, "row": tile.row,
                                         "col": tile.col, "error": short_error(exc)})
        log.warning("tile %d (row %d, col %d) of %s failed: %s", tile.index, tile.row, tile.col, self.inp.path,
                    short_error(exc))

    def _take(self, objects: list[_Object], work: dict[int, list], answers: dict[int, list | None],
              home: bool) -> None:
        """A round's answers into the objects: at home the verdict (found whole, cut, nothing, background); a
        tile that failed answers its objects nothing there (at home: `failed`)."""
        by_index = {o.index: o for o in objects}
        for t, asks in work.items():
            got = answers.get(t)
            if got is None:
                for i, _ in asks:
                    by_index[i].parts[t] = None
                    if home:
                        by_index[i].status = "failed"
                continue
            for i, geom, score, complete, share in got:
                obj = by_index[i]
                obj.parts[t] = geom
                if not home:
                    continue
                obj.score = score
                if geom is None:
                    obj.status = "nothing"
                elif share > BACKGROUND_SHARE:  # background, or an object too large for the window: zoom out
                    obj.status = "zoom" if ZOOM_OUT_DEPTH > 0 else "background"
                elif complete:
                    obj.status, obj.geometry = "found", geom
                else:
                    obj.status = "following"

    def _zoom_out(self, objects: list[_Object]) -> None:
        """Each object whose home answer filled over `BACKGROUND_SHARE` of the window, asked again in a window of
        the same side centred on its point at half the zoom, then a quarter (`ZOOM_OUT_DEPTH`), one encode each:
        seen closed inside such a window (reaching no inner edge) and under the share, it is followed at full
        resolution from there (`hint`); a click on background fills every window and stays `background`."""
        for depth in range(1, ZOOM_OUT_DEPTH + 1):
            asked = [o for o in objects if o.status == "zoom"]
            if not asked:
                return
            tiles = {o.index: self._zoom_tile(o, self.grid.scale / 2 ** depth) for o in asked}
            work = {o.index: [(o.index, self._at(tiles[o.index], o.point))] for o in asked}
            answers = self._round(work, tiles)
            self.stats["zoom_encodes"] += len(work)
            for obj in asked:
                got = answers.get(obj.index)
                if got is None:  # the window failed: the point is as failed as its home would be
                    obj.status = "failed"
                    continue
                _, geom, score, complete, share = got[0]
                closed = geom is not None and complete and self._sides(geom, tiles[obj.index]) < 3
                if closed and share <= BACKGROUND_SHARE:
                    # a cell in from its coarse edge, so no seed of the following lands beside the object
                    obj.hint = geom.buffer(-self._cell(tiles[obj.index]))
                    obj.zoom, obj.score, obj.status = depth, score, "following"
                    self.stats["zoomed"] += 1
                elif geom is None or depth == ZOOM_OUT_DEPTH:
                    obj.status = "background"

    def _zoom_tile(self, obj: _Object, scale: float) -> Tile:
        """A window of the grid's side centred on the object's point at `scale`, shifted into the image; its
        edges inside the image are inner edges (an object reaching one is cut)."""
        size = self.grid.tile_size
        ext = (self.grid.width * scale, self.grid.height * scale)
        x, y = ~self.inp.transform @ (obj.point.x, obj.point.y)
        x0, y0 = (max(0, min(round(c * scale - size / 2), math.floor(e) - size)) for c, e in zip((x, y), ext))
        vw, vh = (max(1, min(size, math.ceil(e - o - 1e-9))) for e, o in zip(ext, (x0, y0)))
        home = self._tile(obj.home)
        return Tile(index=home.index, row=home.row, col=home.col, x0=x0, y0=y0, size=size, scale_xy=(scale, scale),
                    valid_wh=(vw, vh), core_xyxy=(x0, y0, x0 + vw, y0 + vh),
                    interior=(x0 > 0, y0 > 0, x0 + vw < ext[0] - 1e-9, y0 + vh < ext[1] - 1e-9),
                    src_transform=self.grid.transform)

    @staticmethod
    def _at(tile: Tile, point: GeoPoint) -> tuple[float, float]:
        u, v = ~tile.transform @ (point.x, point.y)
        return (float(u), float(v))

    def _sides(self, geom, tile: Tile) -> int:
        """How many sides of the window's content the mask reaches (within a cell and a half): background
        reaches them all once the window holds the whole image (then no edge of it is an inner edge), an
        object at most two (one in a corner of the image)."""
        (x0, y0), (x1, y1) = tile.transform @ (0, 0), tile.transform @ tile.valid_wh
        gx0, gy0, gx1, gy1 = geom.bounds
        near = 1.5 * self._cell(tile)
        xs, ys = sorted((x0, x1)), sorted((y0, y1))
        return sum(d <= near for d in (gx0 - xs[0], xs[1] - gx1, gy0 - ys[0], ys[1] - gy1))

    def _cell(self, tile: Tile) -> float:
        """One mask cell of a window, in CRS units: how far a mask seen there may be off at its edges."""
        return math.hypot(tile.transform.a, tile.transform.d) * MODEL_SIZE / MASK_SIZE

    def _follow(self, objects: list[_Object]) -> dict[int, list]:
        """The next round: for each object still followed, the tiles whose core its known mask reaches and that
        have not answered it yet, each with a click on the part in its core."""
        work: dict[int, list] = {}
        for obj in objects:
            if obj.status != "following":
                continue
            known = shapely.union_all([g for g in [*obj.parts.values(), obj.hint] if g is not None and not g.is_empty])
            asks = []
            for tile in self._tiles_under(known):
                if tile.index in obj.parts:
                    continue
                seed = self._seed(known, tile)
                if seed is not None:
                    asks.append((tile.index, seed))
            if len(obj.parts) + len(asks) > MAX_TILES:
                obj.status = "partial"
                continue
            for t, seed in asks:
                work.setdefault(t, []).append((obj.index, seed))
        return work

    def _core(self, tile: Tile) -> Polygon:
        """A tile's core in the CRS, from grid coordinates (neighbours' shared edges are the same numbers)."""
        x0, y0, x1, y1 = tile.core_xyxy
        return Polygon([self.to_crs @ xy for xy in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))])

    def _tiles_under(self, geom) -> list[Tile]:
        inv = ~self.inp.transform
        xs, ys = zip(*(inv @ xy for xy in shapely.get_coordinates(shapely.envelope(geom))))
        return [t for t in self.grid.tiles_over(min(xs), min(ys), max(xs), max(ys)) if self._core(t).intersects(geom)]

    def _seed(self, known, tile: Tile) -> tuple[float, float] | None:
        """The point of the object's part in the tile's core farthest inside it, in the tile's pixels."""
        part = shapely.intersection(known, self._core(tile))
        polys = [g for g in getattr(part, "geoms", [part]) if g.geom_type == "Polygon" and not g.is_empty]
        if not polys:
            return None
        pixel = abs(self.inp.transform.a) / self.grid.scale
        p = polylabel(max(polys, key=lambda g: g.area), tolerance=pixel)
        return self._tile_px(tile.index, p.x, p.y)

    def _assemble(self, obj: _Object):
        """A followed object: each visited tile's answer inside its own core (where a tile answered nothing,
        what the others saw there), joined."""
        known = shapely.union_all([g for g in obj.parts.values() if g is not None])
        pieces = []
        for t, geom in obj.parts.items():
            core = self._core(self._tile(t))
            pieces.append(shapely.intersection(geom if geom is not None else known, core))
        out = shapely.union_all([g for g in pieces if not g.is_empty])
        return shapely.make_valid(out) if not out.is_valid else out

    # -- after ----------------------------------------------------------------------------------------------

    def _rows(self, objects: list[_Object]) -> gpd.GeoDataFrame:
        """One output row per positive point, in the order given: its object or none, its columns."""
        wkt = self.inp.crs.to_wkt() if self.inp.crs is not None else None
        found = [o.status in ("found", "partial") for o in objects]
        geoms = [o.geometry if f else None for o, f in zip(objects, found)]
        tolerance = length_to_crs(self.inp.frame, self.opts.simplify)
        if tolerance > 0:
            geoms = [g if g is None else g.simplify(tolerance, preserve_topology=True) for g in geoms]
        gdf = gpd.GeoDataFrame({
            "prompt": [LABEL] * len(objects),
            "score": np.asarray([o.score if f else 0.0 for o, f in zip(objects, found)], np.float32),
            "n_tiles": np.asarray([sum(g is not None for g in o.parts.values()) if f else 0
                                   for o, f in zip(objects, found)], np.int32),
        }, geometry=gpd.GeoSeries(geoms, crs=wkt), crs=wkt)
        add_areas(gdf, self.inp.frame)
        gdf["source"] = self._sources(objects, geoms)
        gdf["backend"] = self.spec.backend
        gdf["model"] = self.plan.model_identity
        gdf["found"] = np.asarray(found, bool)
        gdf["status"] = [o.status for o in objects]
        gdf["point_id"] = np.asarray([o.index + 1 for o in objects], np.int64)
        for name in self.plan.points.columns:
            gdf[name] = [dict(o.point.attrs).get(name) for o in objects]
        gdf["_order"] = np.asarray([o.index for o in objects], np.int64)
        return gdf

    def _sources(self, objects: list[_Object], geoms: list) -> list[str]:
        """Each row's `source`: the input; on a mosaic the files its object's pixels came from (as for a prompt
        run), or the file that holds its point where no object was found."""
        lay = layout_of(self.inp.path)
        if lay is None:
            return [source_name(self.inp.path)] * len(objects)
        own = Ownership(lay)
        at = own.owners([shapely.Point(o.point.x, o.point.y) for o in objects])
        named = own.sources([g if g is not None else shapely.Point() for g in geoms])
        return [n if g is not None else own.names[k] for n, g, k in zip(named, geoms, at)]

    def _account(self, objects: list[_Object]) -> None:
        p = self.report.points
        for key in ("nothing", "background", "failed", "partial"):
            p[key] = p.get(key, 0) + sum(o.status == key for o in objects)
        p["found"] = p.get("found", 0) + sum(o.status in ("found", "partial") for o in objects)
        for k, v in self.stats.items():
            p[k] = p.get(k, 0) + v
        if any(o.status == "partial" for o in objects):
            log.warning("%s: %d point object(s) still grew after %d tiles: written as found so far (status "
                        "'partial')", self.inp.path, sum(o.status == "partial" for o in objects), MAX_TILES)
