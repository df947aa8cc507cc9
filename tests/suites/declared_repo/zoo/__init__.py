"""A small model repository's own targets: models, graph passes and fused functions."""
