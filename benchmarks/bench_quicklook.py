"""The quicklook's cost as the image grows: seconds and pixels decoded for `OUT.preview.png`.

    python -m benchmarks.bench_quicklook [--sizes 2000 8000] [--json]

For each size a demo scene (GeoTIFF, 0.3 m, its truth as the objects) is written, then previewed twice:
without overviews (an image over `quicklook.READ_BUDGET` pixels is drawn grey, never decoded) and after
`build_overviews([2, 4, 8, 16, 32])` (read from the overview that fits). The smoke size runs in the tests.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def one(size: int, folder: Path) -> list[dict]:
    import rasterio
    from rasterio.enums import Resampling

    from sam3tiles.readers import open_source
    from sam3tiles.run.pipeline import InputResult
    from sam3tiles.testing.demo import write_scene
    from sam3tiles.units import Frame
    from sam3tiles.writers import quicklook

    scene = write_scene(folder / f"scene{size}.tif", size, size, seed=1)
    gdf = scene.truth.rename(columns={"class": "prompt"})
    gdf["source"] = str(scene.path)
    rows = []
    for overviews in (False, True):
        if overviews:
            with rasterio.open(scene.path, "r+") as ds:
                ds.build_overviews([2, 4, 8, 16, 32], Resampling.average)
        with open_source(scene.path) as src:
            frame = Frame.of(src)
            k = min(1.0, quicklook.MAX_SIDE / size)
            cost = src.read_cost((round(size * k), round(size * k)))
        res = InputResult(str(scene.path), 0, frame=frame)
        t0 = time.perf_counter()
        out = quicklook.write_quicklook(folder / f"p{size}{overviews}.png", gdf, [res], ["red", "blue", "yellow"])
        rows.append({"size": size, "overviews": overviews, "objects": len(gdf),
                     "seconds": round(time.perf_counter() - t0, 3),
                     "level_pixels": cost, "image_drawn": cost <= quicklook.READ_BUDGET,
                     "preview_bytes": out.stat().st_size})
    return rows


def run(sizes: list[int]) -> list[dict]:
    """One row per image size and overview choice: seconds, level read, whether the image was drawn."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for size in sizes:
            rows += one(size, Path(d))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="one 600 px image (checks the code)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sizes = [600]
    rows = run(args.sizes)
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['size']}^2 px, overviews {'yes' if r['overviews'] else 'no '}: {r['seconds']:.2f} s, level "
                  f"{r['level_pixels']:,} px, image {'drawn' if r['image_drawn'] else 'grey'}, {r['objects']} objects")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
