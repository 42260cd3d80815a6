"""The model: the `runtime.ModelRuntime` Protocol every backend implements, the backends (`reference`,
`onnx`, `simulated`), the registry that builds one per worker process (`registry`), the CLIP tokenizer,
and the SAM 3 ONNX model files (`files`: manifest, download, verify) and graph contract (`contract`)."""
