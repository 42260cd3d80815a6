"""The `sam3tiles` command line (also `rio sam3tiles`): one module per command, thin over the library."""
