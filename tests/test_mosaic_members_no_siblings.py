"""A mosaic whose members have nothing beside them that GDAL looks for is read with the folder taken as empty
(`Layout.no_siblings` -> `env.NO_SIBLINGS` in the read task, issue 48: a small GeoTIFF's open 0.28 -> 0.14 ms);
the pixels read are those of the files read alone.

A bug found on the way: every GeoTIFF member was opened with GEOREF_SOURCES=NONE, with which GDAL skips the
file's PAM .aux.xml: a nodata value named there was read as pixels (valid, segmented). Members are now opened
with GEOREF_SOURCES=PAM (`members._Member`: as cheap, 0.09 ms an open; the side file applied)."""

from __future__ import annotations

import numpy as np
import rasterio
from affine import Affine

from sam3tiles.options import Options
from sam3tiles.run.executing.tasks import SourceSpec, read_task
from sam3tiles.run.planning.plan import plan_run

SIDE = 300


def _split(folder, seed: int) -> list[str]:
    folder.mkdir()
    rng = np.random.default_rng(seed)
    paths = []
    for r in range(2):
        for c in range(3):
            p = folder / f"r{r}c{c}.tif"
            t = Affine(0.5, 0, 500000.0 + c * SIDE * 0.5, 0, -0.5, 4100000.0 - r * SIDE * 0.5)
            with rasterio.open(p, "w", driver="GTiff", width=SIDE, height=SIDE, count=3, dtype="uint8",
                               crs="EPSG:32633", transform=t, tiled=True, blockxsize=256, blockysize=256) as ds:
                ds.write(rng.integers(10, 250, (3, SIDE, SIDE), dtype=np.uint8))
            paths.append(str(p))
    return paths


def _reads(paths):
    inp = plan_run(paths, ["red"], options=Options(backend="reference")).inputs[0]
    spec = SourceSpec(inp.path, inp.bands, inp.stretch, inp.identity)
    return inp.path.layout, [(t, read_task(spec, t)[0]) for t in inp.tiles()]


def _at(tile, image, row: int, col: int):
    """(rgb, valid) of map pixel (row, col) in a tile's image read at zoom 1, None outside its window."""
    w = tile.src_window
    r, c = row - int(w.row_off), col - int(w.col_off)
    vw, vh = tile.valid_wh
    if not (0 <= r < vh and 0 <= c < vw):
        return None
    return image.rgb[:, r, c], image.valid[r, c]


def test_members_with_nothing_beside_them_read_the_same_pixels_without_looking(tmp_path):
    paths = _split(tmp_path / "plain", seed=1)
    lay, images = _reads(paths)
    assert lay.no_siblings
    mosaic = np.zeros((3, lay.height, lay.width), np.uint8)
    covered = np.zeros((lay.height, lay.width), bool)
    for k, p in enumerate(paths):
        with rasterio.open(p) as ds:
            m = lay.members[k]
            mosaic[:, m.row:m.row + m.height, m.col:m.col + m.width] = ds.read()
            covered[m.row:m.row + m.height, m.col:m.col + m.width] = True
    assert images and all(im is not None for _, im in images)
    for t, im in images:  # zoom 1: a tile's pixels are the map's in its window, all valid
        w = t.src_window
        r0, c0, (vw, vh) = int(w.row_off), int(w.col_off), t.valid_wh
        assert (int(w.width), int(w.height)) == (vw, vh)
        ok = covered[r0:r0 + vh, c0:c0 + vw]
        assert ok.any() and np.array_equal(im.valid[:vh, :vw], ok)  # the map's holes are its margin only
        assert np.array_equal(im.rgb[:, :vh, :vw][:, ok], mosaic[:, r0:r0 + vh, c0:c0 + vw][:, ok])


def test_one_side_file_and_the_members_are_read_as_before_with_it_applied(tmp_path):
    paths = _split(tmp_path / "aux", seed=2)
    with rasterio.open(paths[4]) as ds:  # its pixel values at (0, 0) named nodata by a PAM side file
        v = ds.read(window=((0, 1), (0, 1)))[:, 0, 0].tolist()
    (tmp_path / "aux" / "r1c1.tif.aux.xml").write_text(
        '<PAMDataset>' + "".join(f'<PAMRasterBand band="{b + 1}"><NoDataValue>{x}</NoDataValue></PAMRasterBand>'
                                 for b, x in enumerate(v)) + '</PAMDataset>')
    lay, images = _reads(paths)
    assert not lay.no_siblings
    m = lay.members[4]
    seen = [px for t, im in images if im is not None and (px := _at(t, im, m.row, m.col)) is not None]
    assert seen
    with rasterio.open(paths[4]) as ds:  # GDAL's own mask of the file with its side file
        assert ds.dataset_mask()[0, 0] == 0
    assert not any(valid for _, valid in seen)  # the side file's nodata applied


def _with_aux_nodata(folder, path: str) -> tuple[int, int]:
    """A PAM side file naming `path`'s pixel (0, 0) nodata; the file's size (w, h)."""
    with rasterio.open(path) as ds:
        v = ds.read(window=((0, 1), (0, 1)))[:, 0, 0].tolist()
    name = path.rsplit("/", 1)[-1]
    (folder / f"{name}.aux.xml").write_text(
        '<PAMDataset>' + "".join(f'<PAMRasterBand band="{b + 1}"><NoDataValue>{x}</NoDataValue></PAMRasterBand>'
                                 for b, x in enumerate(v)) + '</PAMDataset>')
    return SIDE, SIDE


def test_remote_members_apply_a_side_files_nodata_where_their_header_showed_one(tmp_path):
    """Over HTTP a member whose header showed nodata is opened with its PAM side file (the others are not
    asked for one: a request an open)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from range_server import serve

    paths = _split(tmp_path / "remote", seed=3)
    _with_aux_nodata(tmp_path / "remote", paths[4])
    with serve(tmp_path / "remote") as url:
        urls = [f"{url}/{p.rsplit('/', 1)[-1]}" for p in paths]
        lay, images = _reads(urls)
        m = lay.members[4]
        assert m.nodata and not any(k.nodata for i, k in enumerate(lay.members) if i != 4)
        seen = [px for t, im in images if im is not None and (px := _at(t, im, m.row, m.col)) is not None]
        right = lay.members[5]  # a plain member beside it: its first pixel read as it is
        plain = [px for t, im in images if im is not None and (px := _at(t, im, right.row, right.col)) is not None]
    assert seen and not any(valid for _, valid in seen)
    with rasterio.open(paths[5]) as ds:
        first = ds.read(window=((0, 1), (0, 1)))[:, 0, 0]
    assert plain and all(valid and np.array_equal(rgb, first) for rgb, valid in plain)
