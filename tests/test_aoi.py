"""Only where there is something to find (issue 39): an area of interest, the tissue of a slide, and the
tiles they skip, measured against full runs of the same inputs.

* a georeferenced scene with an area covering a quarter of it, given in another CRS (EPSG:4326): the run
  encodes at most the plan's tiles (under half the grid) and writes exactly the full run's objects that
  intersect the area; with clipping each lies inside it, its area column recomputed;
* fields larger than a tile crossing the area's edge: the run grows into the skipped tiles they cross
  into, and they come out whole;
* slides with tissue on a third of their area (brightfield, fluorescence): `tissue="auto"` encodes at most
  half the full run's tiles and finds the same nuclei;
* the pieces alone: the selection's rules, the tissue mask, reading areas (QuPath's exports too).
"""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pytest
import shapely
from click.testing import CliRunner
from shapely import affinity
from shapely.geometry import LineString, box

from sam3tiles.cli.main import cli
from sam3tiles.errors import CRSError, InputDataError, UsageError
from sam3tiles.evaluate import evaluate
from sam3tiles.options import Options
from sam3tiles.readers.area import read_area
from sam3tiles.run.pipeline import segment_job
from sam3tiles.run.planning.plan import plan_input
from sam3tiles.testing.demo import CRS_DEMO, ORIGIN, PIXEL, write_scene
from sam3tiles.testing.slidegen import write_slide
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.tiling.selection import NO_TISSUE, OUTSIDE, AreaSkip, MaskSkip, TileSelection, core_boxes
from sam3tiles.tiling.tissue import tissue_mask

TILING = {"tile_size": 512, "overlap": 128}
GEO_PROMPTS = ["red", "blue", "yellow"]


def run(path, prompts, **kw):
    kw.setdefault("workers", 2)
    gdf, report = segment_job(str(path), prompts, backend="reference", checkpoint=False, **TILING, **kw)
    assert report.failed == 0
    return gdf, report


def best_iou(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame) -> np.ndarray:
    """For each object of `a`, its best IoU with an object of `b` of the same prompt."""
    out = np.zeros(len(a))
    for prompt in set(a["prompt"]):
        ga = np.asarray(a.geometry[a["prompt"] == prompt].values, dtype=object)
        gb = np.asarray(b.geometry[b["prompt"] == prompt].values, dtype=object)
        idx = np.flatnonzero((a["prompt"] == prompt).to_numpy())
        if not len(gb):
            continue
        tree = shapely.STRtree(gb)
        for k, g in zip(idx, ga):
            hits = tree.query(g, predicate="intersects")
            out[k] = max((shapely.area(shapely.intersection(g, gb[h])) / shapely.area(shapely.union(g, gb[h]))
                          for h in hits), default=0.0)
    return out


def same_objects(got: gpd.GeoDataFrame, want: gpd.GeoDataFrame, iou: float = 0.99, f1: float = 1.0) -> None:
    """Every object of each side matches one of the other at IoU >= `iou`; F1 at that IoU >= `f1`."""
    table = evaluate(got, want.assign(**{"class": want["prompt"]}), iou_min=iou)
    assert (table["f1"] >= f1).all(), table.to_string()
    if f1 == 1.0:
        assert (best_iou(got, want) >= iou).all() and (best_iou(want, got) >= iou).all()


# -- a georeferenced scene and an area of a quarter of it, in lon/lat --------------------------------------

def quarter(scene_wh, tmp_path, name="area.geojson", turn=0.0):
    """A square of a quarter of the scene's area at its centre, turned by `turn` degrees, written in EPSG:4326
    (GeoJSON); returned in the scene's CRS as read back (its edges bend a little in lon/lat)."""
    w, h = scene_wh
    x0, y0 = ORIGIN[0] + w / 4 * PIXEL, ORIGIN[1] - 3 * h / 4 * PIXEL
    sq = affinity.rotate(box(x0, y0, x0 + w / 2 * PIXEL, y0 + h / 2 * PIXEL), turn)
    path = tmp_path / name
    gpd.GeoDataFrame({"name": ["county"]}, geometry=[sq], crs=CRS_DEMO.to_wkt()).to_crs(4326).to_file(path)
    return path, gpd.read_file(path).to_crs(CRS_DEMO.to_wkt()).geometry.iloc[0]


@pytest.fixture(scope="module")
def geo(tmp_path_factory):
    d = tmp_path_factory.mktemp("geo")
    scene = write_scene(d / "scene.tif", 3000, 3000, seed=3, n_fields=0)
    full, report = run(scene.path, GEO_PROMPTS)
    area_file, area = quarter((3000, 3000), d)
    return scene, full, report, area_file, area


def test_an_area_in_another_crs_runs_its_tiles_and_writes_the_full_runs_objects_in_it(geo):
    scene, full, full_report, area_file, area = geo
    inp = plan_input(str(scene.path), Options(backend="reference", aoi=str(area_file), **TILING))
    planned = inp.n_to_run
    assert planned <= 0.4 * inp.n_tiles, (planned, inp.n_tiles)  # well under half the grid
    got, report = run(scene.path, GEO_PROMPTS, aoi=str(area_file))
    print(f"\nencoded {report.done} of {full_report.done} tiles (plan: {planned}); objects {len(got)} of {len(full)}")
    assert report.done <= planned and report.area["tiles_grown"] == 0  # no object here is larger than the overlap
    assert report.skipped_by == {OUTSIDE: inp.n_tiles - planned}
    want = full[full.intersects(area)]
    assert len(want) > 50
    same_objects(got, want)
    assert report.area["objects_outside"] > 0


def test_clipped_objects_lie_inside_the_area_with_their_areas_recomputed(geo):
    scene, full, _, area_file, area = geo
    got, report = run(scene.path, GEO_PROMPTS, aoi=str(area_file), aoi_clip=True)
    want = full[full.intersects(area)]
    assert len(got) == int((shapely.area(shapely.intersection(want.geometry.values, area)) > 0).sum())
    assert got.geometry.within(area.buffer(1e-6)).all()
    assert report.area["objects_clipped"] > 0
    np.testing.assert_allclose(got["area_m2"], got.geometry.area, rtol=1e-9)
    np.testing.assert_allclose(got["area_px"], got.geometry.area / PIXEL**2, rtol=1e-9)
    cut = ~got.geometry.within(area.buffer(-1e-6))
    assert cut.any()


def test_a_box_is_in_the_rasters_crs_and_the_plan_draws_the_tiles(geo, tmp_path):
    scene, _, _, _, _ = geo
    x0, y1 = ORIGIN[0] + 1000 * PIXEL, ORIGIN[1] - 1000 * PIXEL
    aoi = f"{x0},{y1 - 600 * PIXEL},{x0 + 600 * PIXEL},{y1}"
    out = tmp_path / "grid.gpkg"
    r = CliRunner().invoke(cli, ["plan", str(scene.path), "--aoi", aoi, "--tile-size", "512", "--overlap", "128",
                                 "--prompts", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    tiles = gpd.read_file(out)
    runs = tiles[tiles["run"]]
    assert 0 < len(runs) < len(tiles) and set(tiles.loc[~tiles["run"], "skip"]) == {OUTSIDE}
    assert f"tiles: {len(tiles)} (8 rows x 8 cols), {len(tiles) - len(runs)} skipped ({len(tiles) - len(runs)} " \
           f"outside the area), {len(runs)} to run" in r.output
    assert "saved" in r.output and "for the full grid of 64" in r.output
    # every tile that runs has its core within half the overlap of the box along each axis; no skipped one
    grown = box(*map(float, aoi.split(","))).buffer(64 * PIXEL, join_style="mitre")
    cores = gpd.GeoSeries(tiles["core"].apply(shapely.from_wkt))
    assert cores[tiles["run"]].intersects(grown).all()
    assert not cores[~tiles["run"]].buffer(-2 * PIXEL).intersects(grown).any()


def test_a_job_file_names_the_area_relative_to_itself(geo, tmp_path):
    scene, _, _, area_file, _ = geo
    (tmp_path / "area.geojson").write_bytes(area_file.read_bytes())
    job = tmp_path / "job.yaml"
    job.write_text(f"inputs: [{scene.path}]\nprompts: {{text: [red]}}\nbackend: {{name: reference}}\n"
                   "tiling: {tile_size: 512, overlap: 128, aoi: area.geojson}\npostprocess: {aoi_clip: true}\n"
                   f"output: {{path: {tmp_path / 'o.gpkg'}}}\n")
    r = CliRunner().invoke(cli, ["run", str(job), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "outside the area" in r.output and "GPU-minutes saved" in r.output


# -- objects larger than a tile crossing the area's edge: the run grows --------------------------------------

def test_fields_crossing_the_area_come_out_whole_as_the_run_grows_into_skipped_tiles(tmp_path):
    scene = write_scene(tmp_path / "fields.tif", 2400, 2400, seed=3, n_fields=5, n_buildings=20, n_cars=40,
                        tile=512)
    area_file, area = quarter((2400, 2400), tmp_path, turn=20)
    full, _ = run(scene.path, GEO_PROMPTS)
    want = full[full.intersects(area)]
    crossing = want[(want["prompt"] == "yellow") & ~want.within(area)]
    assert len(crossing) >= 2  # the scene is what the test needs: fields crossing the area's edge
    got, report = run(scene.path, GEO_PROMPTS, aoi=str(area_file))
    print(f"\ngrown into {report.area['tiles_grown']} tiles; encoded {report.done} of {report.tiles}")
    assert report.area["tiles_grown"] > 0 and report.done < report.tiles
    same_objects(got, want)


def test_a_rerun_of_an_area_resumes_every_tile_it_ran_grown_ones_too(tmp_path):
    scene = write_scene(tmp_path / "fields.tif", 2400, 2400, seed=3, n_fields=5, n_buildings=20, n_cars=40,
                        tile=512)
    area_file, _ = quarter((2400, 2400), tmp_path, turn=20)
    kw = dict(backend="reference", aoi=str(area_file), out=tmp_path / "o.gpkg", workers=2, **TILING)
    first, r1 = segment_job(str(scene.path), GEO_PROMPTS, **kw)
    again, r2 = segment_job(str(scene.path), GEO_PROMPTS, overwrite=True, **kw)
    assert r1.area["tiles_grown"] > 0 and r2.done == 0 and r2.resumed == r1.done
    assert r2.area["tiles_grown"] == r1.area["tiles_grown"]
    same_objects(again, first)


# -- slides: glass around the tissue ------------------------------------------------------------------------

SLIDES = {"brightfield": (["indigo", "crimson"], {}),
          # larger nuclei: the stretch's 98th percentile still falls on nuclei with 2/3 of the slide glass
          "fluorescence": (["white"], {"cell": 64, "fill": 0.6, "size": (20.0, 44.0)})}


@pytest.mark.parametrize("mode", list(SLIDES))
def test_tissue_auto_encodes_half_the_tiles_of_a_slide_a_third_tissue_and_finds_the_same_nuclei(mode, tmp_path):
    prompts, layout = SLIDES[mode]
    slide = write_slide(tmp_path / f"{mode}.ome.tif", 5000, 1500, seed=1, mode=mode, tissue=1 / 3, **layout)
    assert abs(slide.tissue.area(5000, 1500) - 1 / 3) < 0.01
    full, rf = run(slide.path, prompts, tissue="off")
    auto, ra = run(slide.path, prompts)
    print(f"\n{mode}: encoded {ra.done} of {rf.done} tiles; {len(auto)} of {len(full)} nuclei; {ra.area['tissue']}")
    assert rf.done == rf.tiles and ra.done <= rf.done / 2
    assert ra.skipped_by == {NO_TISSUE: rf.tiles - ra.done}
    same_objects(auto, full, iou=0.5, f1=0.995)
    assert evaluate(auto, slide.truth)["f1"].min() >= 0.995


def test_a_slide_without_glass_skips_nothing(tmp_path):
    slide = write_slide(tmp_path / "all.ome.tif", 1600, 1200, seed=2)
    inp = plan_input(str(slide.path), Options(backend="reference", **TILING))
    assert inp.selection() is None and "every tile is segmented (none skipped)" in inp.skips.tissue


# -- the pieces ----------------------------------------------------------------------------------------------

def test_the_first_rule_that_skips_a_tile_names_its_reason():
    grid = TileGrid(2000, 1000, tile_size=512, overlap=128)
    mask = np.zeros((10, 20), bool)
    mask[:, :6] = True  # tissue over the left 600 px
    sel = TileSelection.of(grid, [AreaSkip(box(0, 0, 300, 1000), margin=0), MaskSkip(mask, (100.0, 100.0), margin=0)])
    cores = core_boxes(grid)
    assert sel.grid.shape == (3, 5)
    for i, (x0, _, x1, _) in enumerate(cores):
        expect = None if x0 < 300 else OUTSIDE
        assert sel.reason(i) == expect and sel.runs(i) == (expect is None)
    assert sel.counts() == {OUTSIDE: 12} and sel.to_run == 3
    only_mask = TileSelection.of(grid, [MaskSkip(mask, (100.0, 100.0), margin=0)])
    assert only_mask.counts() == {NO_TISSUE: 9}  # the cores from 832 px on hold no tissue
    assert not only_mask.growable(14) and sel.growable(14)
    copy = sel.copy()
    copy.grow(14)
    assert copy.runs(14) and not sel.runs(14) and copy.grown == {14}
    codes = sel.codes_at(np.asarray([100.0, 1900.0]), np.asarray([50.0, 950.0]))
    assert codes.tolist() == [[0, 1], [0, 1]]


def _glass(bright=True, h=200, w=400, seed=0):
    rng = np.random.default_rng(seed)
    if bright:
        img = np.full((3, h, w), 243.0) + rng.uniform(-8, 8, (3, h, w))
        tissue = (236.0, 196.0, 214.0)
    else:
        img = np.full((1, h, w), 150.0) + rng.uniform(-40, 40, (1, h, w))
        tissue = (600.0,)
    yy, xx = np.mgrid[0:h, 0:w]
    on = ((xx - 120) / 90.0) ** 2 + ((yy - 100) / 80.0) ** 2 <= 1
    hole = (xx - 120) ** 2 + (yy - 100) ** 2 <= 15**2
    for b, v in enumerate(tissue):
        img[b][on & ~hole] = v + rng.uniform(-8, 8, int((on & ~hole).sum()))
    if not bright:  # bright nuclei on the tissue, every 12 px: the top of the range
        img[0][on & ~hole & (xx % 12 < 3) & (yy % 12 < 3)] = 20000
    img[:, 30:32, 330:332] = 120.0 if bright else 2500.0  # a speck of dust on the glass
    return img.astype(np.float32), on


@pytest.mark.parametrize("bright", [True, False])
def test_the_tissue_mask_fills_holes_drops_specks_and_keeps_every_tissue_pixel(bright):
    values, on = _glass(bright)
    tm = tissue_mask(values)
    assert tm.mode == ("brightfield" if bright else "fluorescence") and not tm.note
    assert tm.mask[on].all()  # every tissue pixel, the lumen's too (filled)
    assert not tm.mask[20:45, 320:345].any()  # the speck is dust
    assert tm.mask.mean() < on.mean() * 1.15


def test_a_slide_all_tissue_or_all_glass_is_never_skipped():
    values, _ = _glass(True)
    values[:] = np.asarray((236.0, 196.0, 214.0), np.float32)[:, None, None]  # tissue to the edges
    assert tissue_mask(values).mask.all() and "every tile is segmented" in tissue_mask(values).note


def test_areas_are_read_from_files_in_any_crs_qupath_lists_and_boxes(tmp_path):
    from rasterio.crs import CRS

    a = read_area("500100,4099000,500200,4099100", CRS_DEMO)
    assert a.bounds == (500100.0, 4099000.0, 500200.0, 4099100.0)
    sq = box(500100, 4099000, 500200, 4099100)
    two = tmp_path / "two.gpkg"
    gpd.GeoDataFrame(geometry=[sq], crs=CRS_DEMO.to_wkt()).to_crs(3857).to_file(two, layer="parcels")
    gpd.GeoDataFrame(geometry=[sq.buffer(10)], crs=CRS_DEMO.to_wkt()).to_file(two, layer="other")
    got = read_area(f"{two}:parcels", CRS_DEMO).geometry
    assert got.symmetric_difference(sq).area < 1e-3 * sq.area
    with pytest.raises(UsageError, match="holds 2 layers .* name one"):
        read_area(str(two), CRS_DEMO)
    with pytest.raises(UsageError, match="has no layer 'nope': its layers are parcels, other"):
        read_area(f"{two}:nope", CRS_DEMO)
    # QuPath: a bare list of features in level-0 pixels (no FeatureCollection, no CRS)
    qp = tmp_path / "annotations.geojson"
    feats = [{"type": "Feature", "geometry": shapely.geometry.mapping(box(10, 20, 110, 220)),
              "properties": {"objectType": "annotation"}}]
    qp.write_text(json.dumps(feats))
    assert read_area(str(qp), None).bounds == (10.0, 20.0, 110.0, 220.0)
    fc = tmp_path / "fc.geojson"
    fc.write_text(json.dumps({"type": "FeatureCollection", "features": feats}))
    assert read_area(str(fc), None).bounds == (10.0, 20.0, 110.0, 220.0)
    with pytest.warns(UserWarning, match="'crs' was not provided"):  # pyogrio says so: the point of the case
        gpd.GeoDataFrame(geometry=[sq]).to_file(tmp_path / "nocrs.gpkg")
    with pytest.raises(CRSError, match="no CRS but the raster has one"):
        read_area(str(tmp_path / "nocrs.gpkg"), CRS_DEMO)
    with pytest.raises(CRSError, match="the image has no CRS .* level-0 pixels"):
        read_area(f"{two}:other", None)
    gpd.GeoDataFrame(geometry=[LineString(sq.exterior.coords)], crs=CRS_DEMO.to_wkt()).to_file(tmp_path / "l.gpkg")
    with pytest.raises(InputDataError, match="holds lines .* buffer them first"):
        read_area(str(tmp_path / "l.gpkg"), CRS_DEMO)
    assert read_area(f"{two}:parcels", CRS.from_epsg(4326)).bounds[0] == pytest.approx(15.0, abs=1.0)


class _Pieces:
    """What `tiling.growth` reads of a tile's `vectorize.Pieces`."""

    def __init__(self, geoms, complete=False):
        self.geometry, self.prompt, self.complete = list(geoms), [0] * len(geoms), [complete] * len(geoms)

    def __len__(self):
        return len(self.geometry)


@pytest.mark.parametrize("first", [0, 1])
def test_growth_follows_an_object_of_the_area_whatever_order_its_tiles_finish_in(first):
    from sam3tiles.tiling.frame import TileFrames
    from sam3tiles.tiling.growth import Growth

    grid = TileGrid(1664, 512, tile_size=512, overlap=128)  # one row of 4 tiles, windows from x = 0, 384, 768, 1152
    area = box(0, 0, 100, 512)
    sel = TileSelection.of(grid, [AreaSkip(area, margin=400)])  # tiles 0 and 1 run
    assert [sel.runs(i) for i in range(4)] == [True, True, False, False]
    bar = box(50, 200, 1500, 260)  # an object of the area four tiles long
    frames = TileFrames(grid)
    growth = Growth(grid, frames, sel, area)
    piece = {i: _Pieces([bar.intersection(frames[i].window)]) for i in range(4)}
    tiles = {i: grid.tile(0, i) for i in range(4)}
    second = 1 - first
    # tile 1's piece does not touch the area: it waits when it comes first, and continues tile 0's when it comes
    grown = growth.arrived(tiles[first], piece[first]) + growth.arrived(tiles[second], piece[second])
    assert grown == [2] and sel.runs(2) and sel.grown == {2}
    assert growth.arrived(tiles[2], piece[2]) == [3]
    assert growth.arrived(tiles[3], piece[3]) == []
    # a whole object, or another prompt's, takes no tile
    sel2 = TileSelection.of(grid, [AreaSkip(area, margin=400)])
    g2 = Growth(grid, frames, sel2, area)
    assert g2.arrived(tiles[1], _Pieces([piece[1].geometry[0]], complete=True)) == []


def _random_pieces(rng, tile, n=24):
    """Pieces of `tile` near its edges, in the CRS: staircase outlines of masks (as the vectorizer draws
    them, at whole pixels: distances tie with the reach) and free polygons (turned, at any coordinate)."""
    from sam3tiles.vectorize.pieces import mask_to_geometry

    vw, vh = tile.valid_wh
    out = []
    for k in range(n):
        x, y = rng.integers(-40, 40, 2) % np.array([vw, vh])  # near an edge, a corner more often
        if k % 2:
            mask = np.zeros((vh, vw), bool)
            for _ in range(3):
                x0, y0 = np.clip([x, y] + rng.integers(-20, 20, 2), 0, [vw - 1, vh - 1])
                mask[y0:y0 + rng.integers(1, 120), x0:x0 + rng.integers(1, 120)] = True
            g = mask_to_geometry(mask, tile.transform)
        else:
            blob = affinity.rotate(box(0, 0, *rng.uniform(2, 150, 2)), rng.uniform(0, 90))
            blob = affinity.translate(blob, x + rng.uniform(-30, 30), y + rng.uniform(-30, 30))
            g = affinity.affine_transform(blob.intersection(box(0, 0, vw, vh)), tile.transform.to_shapely())
        if g is not None and not g.is_empty:
            out.append(g)
    return out


@pytest.mark.parametrize("turn", [0.0, 30.0])
def test_a_cut_pieces_neighbours_are_those_its_outline_grown_by_the_reach_overlaps_past_its_window(turn):
    """The distance rule (`Growth._targets`) against the buffer it replaced (`targets_by_buffer`), piece
    by piece, on a georeferenced grid with edge tiles narrower than the rest. Turned, the neighbours'
    windows are a rounding error off the tile's along their shared edges, where the buffer's answer was
    that error's: there the rule is drawn in grid pixels (whole numbers) instead, but for the pieces the
    buffer still decides (their distance ties with the reach)."""
    from affine import Affine

    from sam3tiles.tiling.frame import TileFrames
    from sam3tiles.tiling.growth import Growth, targets_by_buffer

    transform = Affine.translation(4e5, 5e6) @ Affine.rotation(turn) @ Affine.scale(0.3, -0.3)
    grid = TileGrid(1300, 1000, tile_size=512, overlap=128, transform=transform)
    pixels_grid = TileGrid(1300, 1000, tile_size=512, overlap=128)
    frames, in_pixels = TileFrames(grid), TileFrames(pixels_grid)
    growth = Growth(grid, frames, TileSelection.of(grid), box(0, 0, 1, 1))
    rng = np.random.default_rng(5)
    seen: dict[int, int] = {}
    for t in range(len(grid)):
        tile = grid.tile(*divmod(t, grid.shape[1]))
        near = growth._neighbours(tile.row, tile.col)
        windows, pixels = frames.windows([t] + near)
        px_windows = in_pixels.windows([t] + near)[0]
        for g in _random_pieces(rng, tile):
            tied = growth.decided_by_buffer
            got = growth._targets(tile.row, tile.col, [g])[0]
            want = targets_by_buffer(g, growth.reach * pixels[0], windows[0], near, windows[1:])
            if turn and growth.decided_by_buffer == tied:
                g_px = affinity.affine_transform(g, (~transform).to_shapely())
                want = targets_by_buffer(g_px, growth.reach, px_windows[0], near, px_windows[1:])
            assert got == want, (t, g.wkt)
            seen[len(want)] = seen.get(len(want), 0) + 1
    n = sum(seen.values())
    # pieces reaching no neighbour, one, and three (side, side, corner), the buffer consulted on a few only
    assert seen.get(0, 0) > 10 and seen.get(1, 0) > 10 and seen.get(3, 0) > 10, seen
    assert growth.decided_by_buffer < n // 10, (growth.decided_by_buffer, n)


def test_growth_on_fields_crossing_the_area_decides_as_the_buffer_did_without_growing_outlines(tmp_path, monkeypatch):
    """A run over fields larger than a tile crossing the area's edge: every cut piece's neighbours are the
    buffer rule's, the run grows into the same tiles and writes the same objects as with the rule itself,
    and no piece's outline is grown (`shapely.buffer`) but the few whose distance ties with the reach."""
    import threading

    from sam3tiles.tiling.growth import Growth, targets_by_buffer

    scene = write_scene(tmp_path / "fields.tif", 2400, 2400, seed=3, n_fields=5, n_buildings=20, n_cars=40,
                        tile=512)
    area_file, _ = quarter((2400, 2400), tmp_path, turn=20)
    fast, buffer, counted = Growth._targets, shapely.buffer, {"buffer": 0, "pieces": 0, "by_buffer": 0}
    inside = threading.local()

    def counting(*a, **k):
        counted["buffer"] += bool(getattr(inside, "on", False))
        return buffer(*a, **k)

    def rule(self, row, col, geoms):
        near = self._neighbours(row, col)
        windows, pixels = self.frames.windows([row * self.grid.shape[1] + col] + near)
        return [targets_by_buffer(g, self.reach * pixels[0], windows[0], near, windows[1:]) for g in geoms]

    def checked(self, row, col, geoms):
        n0, inside.on = self.decided_by_buffer, True
        got = fast(self, row, col, geoms)
        inside.on = False
        assert got == rule(self, row, col, geoms)
        counted["pieces"] += len(geoms)
        counted["by_buffer"] += self.decided_by_buffer - n0
        return got

    monkeypatch.setattr(shapely, "buffer", counting)
    monkeypatch.setattr(Growth, "_targets", checked)
    got, report = run(scene.path, GEO_PROMPTS, aoi=str(area_file))
    monkeypatch.setattr(Growth, "_targets", rule)
    want, before = run(scene.path, GEO_PROMPTS, aoi=str(area_file))
    assert report.area["tiles_grown"] == before.area["tiles_grown"] > 0 and report.done == before.done
    assert counted["pieces"] >= 20 and counted["buffer"] == counted["by_buffer"] <= counted["pieces"] // 10, counted
    key = ["prompt", "score"]
    a, b = got.sort_values(key).reset_index(drop=True), want.sort_values(key).reset_index(drop=True)
    assert len(a) == len(b) and all(x.equals_exact(y, 0) for x, y in zip(a.geometry, b.geometry))
