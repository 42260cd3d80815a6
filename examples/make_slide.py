"""Make a synthetic whole-slide image: a pyramidal OME-TIFF (BigTIFF, 512 px zlib tiles) with known nuclei.

    python examples/make_slide.py                                   # 40000 x 40000 brightfield slide
    python examples/make_slide.py --size 8000 --mode fluorescence --out examples/data/nuclei.ome.tif
    sam3tiles segment examples/data/slide.ome.tif --text indigo --backend reference \
        --out slide.qupath.geojson --labels slide-labels.ome.tif

The slide is written tile by tile, every pyramid level rendered from the object list, so its size is
limited by the disk, not the memory (40000^2 RGB: about 2.5 GB on disk, a few minutes). The truth is
written beside it as a GeoPackage in full-resolution pixel coordinates (no CRS), column `class` = the
colour name the reference backend finds: brightfield `indigo` (nuclei) and `crimson` (red blood cells);
fluorescence `white` (nuclei in channel 1, a DAPI-like stain; use --channels 1).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "data" / "slide.ome.tif"), help="slide path (.ome.tif)")
    ap.add_argument("--size", type=int, default=40000, help="width in pixels (default 40000)")
    ap.add_argument("--height", type=int, default=None, help="height in pixels (default: --size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", choices=["brightfield", "fluorescence"], default="brightfield")
    ap.add_argument("--channels", type=int, default=1, help="fluorescence channels (channel 1: nuclei)")
    ap.add_argument("--shape", choices=["ellipse", "rect"], default="ellipse")
    ap.add_argument("--truth", default=None, help="truth GeoPackage (default: <slide>-truth.gpkg)")
    ap.add_argument("--no-truth", action="store_true", help="skip the truth file (faster for benchmarks)")
    ap.add_argument("--workers", type=int, default=None, help="compression threads (default: tifffile's)")
    args = ap.parse_args(argv)

    from sam3tiles.testing.slidegen import Pyramid, write_slide

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    height = args.height or args.size
    t0 = time.perf_counter()
    slide = write_slide(out, args.size, height, args.seed, mode=args.mode, channels=args.channels,
                        shape=args.shape, pyramid=Pyramid(maxworkers=args.workers), truth=not args.no_truth)
    n = len(slide.objects)
    print(f"{out}: {args.size} x {height} px, {len(slide.levels)} levels {slide.levels}, {n} objects, "
          f"{out.stat().st_size / 1e9:.2f} GB, {time.perf_counter() - t0:.0f} s")
    if not args.no_truth:
        truth = Path(args.truth) if args.truth else out.with_name(out.name.split(".")[0] + "-truth.gpkg")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*crs.*was not provided", category=UserWarning)
            slide.truth.to_file(truth, driver="GPKG", layer="truth", engine="pyogrio")
        print(f"{truth}: {len(slide.truth)} truth polygons (pixel coordinates, no CRS)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
