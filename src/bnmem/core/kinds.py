"""The pool's sample kinds and the evaluation subsets: one table every stage reads."""

CLEAN, FLIPPED, OOD = 0, 1, 2  # pool.npz `kind` codes
KINDS = {"clean": CLEAN, "flipped": FLIPPED, "ood": OOD}  # the one kinds table
SUBSETS = {"all": None, **KINDS}  # evaluation subsets: None = every sample

YOURS = "your_model"  # the audited model's key beside the arms (exposure, report)
