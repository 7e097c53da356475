"""bench/real_shadow_sixth.py: a sixth, fresh pool re-checks the rule the headline interval
uses (bench/results/real_shadows_sixth_plan.md)."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_sixth as S  # noqa: E402  (bench/real_shadow_sixth.py)


@pytest.mark.slow  # six pools' stores and the pooled cells (about a minute)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_follows_it():
    """The table regenerates byte for byte from the committed stores, and `mixed` reads the
    rule the plan's decision leaves for class A."""
    import real_shadow_deleted as D
    import real_shadow_keypooled as K
    import real_shadow_pooled as P
    from bnmem.attack import intervals as I
    pools = {name: P.load_pool(seed, n) for name, seed, n in S.POOLS}
    per_pool = {p: D.table(d) for p, d in pools.items()}
    six = {cls: K.pooled_cell(list(pools.values()), cls) for cls in (S.DECIDED, *S.REPORTED)}
    dec = S.decide(per_pool, six)
    text = S.markdown(per_pool, six, dec, S.headline(pools))
    assert text + "\n" == (ROOT / "bench" / "results" / "real_shadows_sixth.md").read_text()
    assert (I.MIXED_RULES[("auc", "common")] == "delete4_halves") == dec["stays"]
