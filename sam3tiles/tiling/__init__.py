"""Tiling: where each tile lies. `grid` lays an input out in 1008x1008 windows at one scale (`TileGrid`,
`Tile`: pixels), `frame` puts a tile in map coordinates (`TileFrame`: its window, core and exclusive area),
`piecekey` names a tile's pieces and orders them, and `refine` splits a tile that hit the model's object cap
into sub-tiles at twice the zoom. It hands tiles on to the readers and the model, and frames and keys to the
merge."""
