"""Membership inference on the shadows' logits: LiRA, RMIA, ROC, resampling intervals, matched-utility comparisons and the attack stage. numpy only: never imports torch."""
