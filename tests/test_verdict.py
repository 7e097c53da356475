"""Every branch of the verdict rule (bnmem.verdict) and the claims table built on it."""
import pytest

from bnmem.summary import claims
from bnmem.verdict import (EQUAL_ONLY, EQUAL_UNMATCHED, INCONCLUSIVE, NOT_MEASURED,
                           NOT_REPRODUCED, REPRODUCED, Evidence, judge, judge_share)


def ev(lo, hi, training=True):
    return Evidence((lo + hi) / 2, lo, hi, training)


@pytest.mark.parametrize("equal,matched,direction,threshold,expected", [
    (ev(0.1, 0.2), ev(0.05, 0.1), 1, 0.0, REPRODUCED),          # matched interval above 0
    (ev(0.1, 0.2), ev(-0.01, 0.1), 1, 0.0, EQUAL_ONLY),         # only equal epochs above
    (ev(0.1, 0.2), ev(-0.1, -0.02), 1, 0.0, EQUAL_ONLY),        # matched even contradicts
    (ev(0.1, 0.2), None, 1, 0.0, EQUAL_UNMATCHED),              # matched not measured
    (ev(-0.1, 0.2), ev(-0.1, -0.02), 1, 0.0, NOT_REPRODUCED),   # matched below 0
    (ev(-0.3, -0.2), None, 1, 0.0, NOT_REPRODUCED),             # equal epochs decides alone
    (ev(-0.1, 0.2), ev(-0.1, 0.1), 1, 0.0, INCONCLUSIVE),       # both straddle
    (ev(0.05, 0.2), ev(0.02, 0.1), 1, 0.04, EQUAL_ONLY),        # threshold 4 points
    (ev(0.05, 0.2), ev(0.045, 0.1), 1, 0.04, REPRODUCED),
    (ev(0.0, 0.2), ev(0.0, 0.035), 1, 0.04, NOT_REPRODUCED),    # whole interval < 4 points
    (ev(-0.2, -0.1), ev(-0.2, -0.05), -1, 0.0, REPRODUCED),     # claimed decrease
    (ev(-0.2, -0.1), ev(0.01, 0.05), -1, 0.0, EQUAL_ONLY),
    (ev(0.1, 0.2), ev(0.1, 0.2, training=False), 1, 0.0, EQUAL_UNMATCHED),  # samples-only
    (ev(0.1, 0.2), Evidence(0.03, None, None, True), 1, 0.0, EQUAL_UNMATCHED),  # no interval
    (ev(0.1, 0.2, False), ev(0.1, 0.2, False), 1, 0.0, INCONCLUSIVE),  # samples only: never
    (ev(-0.3, -0.2, False), None, 1, 0.0, INCONCLUSIVE),
    (Evidence(0.1, None, None, True), None, 1, 0.0, INCONCLUSIVE),  # no interval
    (None, None, 1, 0.0, NOT_MEASURED),
])
def test_judge(equal, matched, direction, threshold, expected):
    assert judge(equal, matched, direction, threshold) == expected


def test_judge_share():
    assert judge_share(3, 4) == REPRODUCED
    assert judge_share(2, 4) == NOT_REPRODUCED  # half is not most
    assert judge_share(0, 0) == NOT_MEASURED


def test_claims_follow_the_evidence():
    """A run where BN leaks more only at equal epochs reads 'at equal epochs only'."""
    def est(v, lo, hi):
        return {"value": v, "lo": lo, "hi": hi}
    bn = {"equal_epochs": {"auc_identity": est(0.17, 0.14, 0.19), "auc_clean": est(0.16, 0.13, 0.18),
                           "in_acc_flipped": est(0.6, 0.5, 0.7), "in_acc_ood": est(0.5, 0.3, 0.7)},
          "matched_fit": {"auc_identity": est(-0.02, -0.04, 0.005),
                          "in_acc_flipped": est(0.03, 0.01, 0.06), "in_acc_ood": est(0.1, -0.03, 0.27)}}
    reg = {"equal_epochs": {"in_acc_flipped": est(-0.5, -0.6, -0.4), "out_acc_clean": est(0.0, -0.02, 0.02)},
           "matched_fit": {"in_acc_flipped": est(-0.02, -0.05, 0.01)}}
    membership = {"variant": "lira_online_fixed",
                  "compare": {"batchnorm_minus_none": bn, "batchnorm_reg_minus_batchnorm": reg}}
    grads = {"batchnorm_minus_none_flipped": {"equal_epochs": est(1.9, 1.5, 2.4),
                                              "matched_fit": est(1.2, 0.9, 1.5)}}
    gamma = {"n_layers_majority_above_1": 2, "n_layers": 4}
    rows = {r["claim"][:30]: r for r in claims(membership, grads, gamma, None, 0.05, 0.01)}
    verdicts = [r["verdict"] for r in rows.values()]
    assert verdicts == [REPRODUCED,        # flipped memorization: matched interval > 0
                        EQUAL_ONLY,        # OOD: matched straddles
                        EQUAL_ONLY,        # AUC >= 4 points: only at equal epochs
                        EQUAL_UNMATCHED,   # clean AUC: no matched figure
                        INCONCLUSIVE,      # gradients: samples-only intervals
                        NOT_MEASURED,      # OOD gradients absent
                        NOT_REPRODUCED,    # gamma: 2 of 4 layers
                        EQUAL_ONLY,        # regularizer: memorization cut at equal epochs only
                        INCONCLUSIVE]      # accuracy within 1 point: interval reaches -2
    first = next(iter(rows.values()))
    assert first["matched_fit"]["interval"] == "models+samples" and first["judged_at"] == "matched fit"
