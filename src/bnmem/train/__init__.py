"""Training: the plain loop, target models, stacked shadow models (C kernels for LeNet), query views and Dask scale-out."""
