"""Merging pieces across tiles: each object once and whole, whatever the tiles' answers looked like.

A real SAM 3 does not return the same clean instance for an object in every tile (../shared/model-
behaviour.md): masks hold several separate regions, a prompt can come back as one semantic mask, an
instance can be split in two or fused with a neighbour, masks differ by a cell between tiles, and a cut
mask can stop short of the tile edge. The rules, in order:

0. *Parts.* Every piece is split into its connected regions; regions closer than `JOIN_CELLS` (1.5) mask
   cells stay one part, kept as a MultiPolygon (an instance behind a thin occluder, or a mask that dipped
   under 0.5 for a cell: at the mask's resolution nothing separates them). Regions farther apart are
   separate parts (a concept answer such as "water", one mask per prompt, two instances in one mask), each
   linked, owned and stitched on its own: no region is dropped because another region of its mask linked
   elsewhere. A part's seam flags are measured on the part.
1. *Candidates.* A part that lies wholly in its tile's exclusive area (covered by no other window) has no
   counterpart anywhere: it is final. Only parts in overlap bands are compared, and only pairs from
   different tiles (an R-tree query), so the cost is near-linear in the number of pieces.
2. *Links by mask overlap in the shared band.* Two parts of one prompt from tiles A and B are compared
   inside A's window intersected with B's: there both tiles saw the same pixels, so two views of one
   object agree (IoU >= 0.5), also when one view is cut by its tile edge. Intersection over the smaller
   >= 0.8 links part-whole views. Masks move by a mask cell between tiles (a grown copy beside a shrunk
   one, a half beside a shrunk whole: for a 3 x 6 cell vehicle IoU and IoS fall far below those bounds), so
   a pair that fails both is compared once more with `LINK_CELLS` (1) cell of tolerance: the smaller
   clipped part lying >= 0.8 within one cell of the other. A neighbour one cell away shares only a strip
   of one cell with that tolerance, so touching objects wider than about 2 cells do not link. No link by
   containment alone (IoU under 0.5) where the smaller view is a strip no deeper than `SLIVER_CELLS` (2)
   cells along the band's edge whose part goes on past the band: the other tile sees it at its own edge,
   fused with whatever lies there (two text lines 0.1 x their height apart). Two cut
   parts that still disagree are linked when they overlap in the band over a region `THICK_CELLS` (4)
   cells across and their own-core areas meet at the core line: two tiles that each split one object, at
   different places (a grown neighbour overlaps by a strip of a cell or two); where either is elongated
   (`ELONGATED`, 2 times longer than wide) the overlap spans half its width or more (a view that fused a strip
   with a slice of the one beside it overlaps that one along it, not across). Boxes are never used:
   touching neighbours do not fuse.
3. *Components.* The connected components of the links are settled one at a time; no link is refused.
   Tiles that disagree (whole in one, two halves in another; two neighbours fused in one) are settled by
   rule 4 and counted as `disagreements`, not as rule violations.
4. *Ownership.* The complete parts of a component (cut at no interior tile edge, `EDGE_MARGIN`) are taken in
   order of authority: owned by their own tile (the centre of the object, their box grown by the boxes of the
   parts they link to, lies in its core) first, then farther from their tile's edges, in steps of
   `AUTHORITY_CELLS` mask cells (one cell of difference does not flip the choice), then tile order; scores never
   decide (they differ between tiles by chance). A complete part is kept unless it is linked to a kept part of
   another tile (it is then another view of that object: a duplicate). So the tile owning an object decides what
   it is (one whole, two halves, two neighbours fused), and a copy another tile sees whole wins where the owner
   saw it cut or not at all; but a complete part its tile does not own that lies inside an object stitched from
   the owners' cut parts (a blob inside a field that only a neighbour reported) is another view of that object;
   and a complete part its tile does not own, linked to the owner's cut part reaching past it (the owner's core
   area not covered by it: its tile split what the owner saw as one), is stitched with it (rule 5), as is one
   whose tile split the object where the owner drew nothing of it (no part of the component owned: the views of
   that core decide together). So is a complete part its tile owns that another tile's linked cut part reaches
   past inside that tile's own core, where the owner split it from a cut stub lying outside the owner's core (the
   split lies in the other tile's area, which drew one object), or where the owner reported nothing over a
   stretch of its window `THICK_CELLS` across that the cut part covers (a partial miss: that stretch, in the
   owner's core, is kept as a miss is), or where the owner's view stops short of its window's edge (within
   `EDGE_MARGIN` and the sliver tolerance) while the cut part goes on past that edge over a stretch `THICK_CELLS`
   across (`short`: the owner could not see there; a model's mask can stop a cell or two short of the tile edge).
   A split, or another object, the owner drew inside its own core stands.
5. *Stitching.* A cut part is a duplicate when what it says (inside its own tile's core, and in the cores
   of tiles with no part in the component: a miss) is at least half covered by the kept complete parts. The
   other cut parts are clipped to their tiles' cores (grown by one pixel so neighbours overlap; in the cores
   of tiles that have no part in the component, a miss, or none linked to or within the gap of the part,
   they keep their area where it joins the object) and unioned;
   the union's regions (rule 0's gap) are objects. Objects larger than the overlap, up to "stuff" spanning
   many tiles, come out as their connected regions, each stitched across the seams it crosses. Where tiles
   overlap and their views of it disagree (the median distance between their boundaries there at least
   `AGREE_CELLS`, half a mask cell: a model's boundary noise), the stitched outline is smoothed along its
   length (`smooth`): each point the mean of the outline within a window of up to `REACH_CELLS` (29) cells
   each way, cut short before a corner or a meander (the chords to the window's ends turn by at most `TURN`),
   up to `LONG_REACH_CELLS` (100) on straight stretches (the
   chords turning so little that the mean lies within `BIAS_CELLS` of the arc), moved at most `CAP_CELLS` (2)
   cells; where the views agree
   nothing moves. A smoothing that would split a part, join two or open or close a hole is not made; the
   owned area it gives up is counted (`coverage`: `blended`). Nor is
   a stitch made that fuses what the tiles drew apart (`apart`): a part holding two neighbouring parts of
   another tile (two strips a cell or two apart drawn as one region; neighbours face each other along their
   length, or across a gap along a compact object's side: the halves of an elongated object a tile split
   across face each other across its width only) that, without such parts, lie in groups that two tiles
   drew apart (two it holds, or two along the objects), or their owner did, leaves the groups to be
   stitched each on its own, its area in its core divided among them (two tiles that drew them apart
   outweigh the one that fused them, owner or not); groups no tile drew apart that only the fusing parts
   connect are paired first, in the order they lie side by side where two drawn apart face two across the
   fusing tile, else most in line (an object's stretches on either side of the fusing tile).
6. *Slivers.* A cut part that no neighbour matched (or cut parts linked only to each other), lying outside
   its own tile's core and within one mask cell of another object, is the edge of an object another tile
   owns (a few pixels poking into a tile rarely match in shape): it is dropped and counted. "Beside" is
   within `SLIVER_CELLS` (2) mask cells: each of the two copies can move by a cell. Cut parts linked only
   to each other (two tiles agree on them) are dropped only beside an object of their own prompt: another
   prompt's mask says nothing of them, and they are the views of an object its owners missed. A lone one
   is still dropped beside any prompt's object (its own prompt alone kept false positives the tiles' edges
   made: docs/how-close-the-merge-comes.md).

*Coverage.* For every prompt, the output covers what each tile said is object inside its own core, apart
from the drops of rules 4-6. `MergeStats.coverage` holds per prompt the area the tiles own (each part
inside its own tile's core, the cores not grown: they partition the image), the area out, and the owned
area each rule dropped that no output covers (slivers: their whole owned area), in CRS units squared. Area
no rule accounts for never disappears.

The package: `parts` (a part's columns, its regions, the thresholds), `rules` (rules 0-6 over one pass:
`merge_pieces`), `halves` (rule 4's complete parts stitched with the cut parts), `apart` (rule 5's guard against
fusing what the owners kept apart), `pairing` (its stretches of one object on either side of a fusing region
joined), `shares` (the division of a region that fused them among their objects),
`smooth` (rule 5's boundary model where views disagree), `consensus` (its move to the views' consensus where they
differ by a steady offset), `bandmean` (its mean of the views on a meander's shared bands), `stats` (`MergeStats`:
the counts and the coverage figures), `blocks` (the same merge by spatial blocks, fed tile by tile: `BlockMerger`,
`merge_blocked`). A tile's frame in map coordinates (`TileFrame`) lives in `sam3tiles.tiling.frame`; the piece and
order keys in `sam3tiles.tiling.piecekey`.
"""

from __future__ import annotations

from .blocks import BlockMerger, BlockPart, GridBlocks, Packed, merge_block, merge_blocked, tile_blocks
from .parts import IOS_MIN, IOU_MIN, Merged
from .rules import merge_pieces
from .stats import COVERAGE_KEYS, MergeStats

__all__ = ["BlockMerger", "BlockPart", "COVERAGE_KEYS", "GridBlocks", "IOS_MIN", "IOU_MIN", "MergeStats", "Merged",
           "Packed", "merge_block", "merge_blocked", "merge_pieces", "tile_blocks"]
