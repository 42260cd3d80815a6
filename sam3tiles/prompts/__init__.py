"""Prompts: what the model is asked in each tile. `prompt` holds a job's text and example boxes (`Prompt`,
`GeoBox`) and gives each tile its boxes in the tile's model frame and its decoder passes (`TilePrompt`);
`chips` reads example images cut from other images; `exemplars` carries example boxes into every tile's free
margin (`--box-scope image`), and `strip` narrows the tiles' content when no margin holds them. It hands a
`TilePrompt` per tile and prompt on to the run's tasks."""
