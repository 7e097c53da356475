"""Image sources, loaders, the prepared pool and the corruption of the training labels."""
