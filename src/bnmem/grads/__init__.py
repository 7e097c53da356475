"""Per-sample gradient norms of trained targets (vmap, the C kernel, the batch-coupled definition)."""
