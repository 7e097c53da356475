"""The theory stage: a numeric check of the (gamma/sigma)^2 mechanism on one conv channel."""
