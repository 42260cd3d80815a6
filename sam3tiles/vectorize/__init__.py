"""Vectorize: the model's masks to polygons in the source CRS. `pieces` turns a tile's `Detections` into
`Pieces` (each keyed by `tiling.piecekey`; a prompt's decoder passes are one answer, `merge_passes`), and
`polygonize` upsamples, thresholds and traces a tile's masks in one pass. It hands `Pieces` on to the merge."""
