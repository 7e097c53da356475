"""The pool's sample kinds and the evaluation subsets: one table every stage reads."""

CLEAN, FLIPPED, OOD = 0, 1, 2  # pool.npz `kind` codes
KINDS = {"clean": CLEAN, "flipped": FLIPPED, "ood": OOD}  # the one kinds table
SUBSETS = {"all": None, **KINDS}  # evaluation subsets: None = every sample
RARE = ("flipped", "ood")  # the corrupted kinds: the samples a model can only memorize
HEADLINE = ("all", *RARE)  # the subsets the headline tables report (clean is the bulk of "all")

YOURS = "your_model"  # the audited model's key beside the arms (exposure, report)
