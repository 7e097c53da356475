"""bench/real_shadow_sixth.py and real_shadow_seventh.py: a sixth and a seventh fresh pool
re-check D4 for the AUC classes (bench/results/real_shadows_sixth_plan.md,
real_shadows_seventh_plan.md); both tables from one load of the seven pools."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_sixth as S  # noqa: E402  (bench/real_shadow_sixth.py)
import real_shadow_seventh as V  # noqa: E402  (bench/real_shadow_seventh.py)


@pytest.mark.slow  # seven pools' stores and the pooled cells (about 15 s)
def test_both_outcomes_follow_from_the_stores():
    """Both tables regenerate byte for byte from the committed stores; the sixth reverted
    class A, the seventh adopts D4 for classes A and E and keeps `both` for B (the eighth
    then adopted it for B: tests/test_eighth.py checks the pipeline and the report); the
    plan and README quote the seventh's figures."""
    import real_shadow_deleted as D
    import real_shadow_keypooled as K
    import real_shadow_pooled as P
    from bnmem.attack import intervals as I
    pools = {name: P.load_pool(seed, n) for name, seed, n in V.POOLS}
    assert list(pools)[:6] == [name for name, _, _ in S.POOLS]
    per_pool = {p: D.table(d) for p, d in pools.items()}
    six_pools = {p: pools[p] for p, _, _ in S.POOLS}
    six = {cls: K.pooled_cell(list(six_pools.values()), cls) for cls in (S.DECIDED, *S.REPORTED)}
    dec6 = S.decide({p: per_pool[p] for p in six_pools}, six)
    text6 = S.markdown({p: per_pool[p] for p in six_pools}, six, dec6, S.headline(six_pools))
    assert text6 + "\n" == (ROOT / "bench" / "results" / "real_shadows_sixth.md").read_text()
    assert not dec6["stays"]  # the sixth pool reverted class A (the seventh brought it back)
    seven = {cls: K.pooled_cell(list(pools.values()), cls) for cls in V.DECIDED}
    dec = V.decide(per_pool, seven)
    head = S.headline(pools)
    text = V.markdown(per_pool, seven, dec, head)
    assert text + "\n" == (ROOT / "bench" / "results" / "real_shadows_seventh.md").read_text()
    assert {c for c in V.DECIDED if dec[c]["adopted"]} == {"A", "E"}
    # the pipeline follows the eighth plan, which kept D4 for A and E and adopted it for B
    # (tests/test_eighth.py); the seventh's fallbacks are still the fallbacks
    reads = {"A": "common", "B": "overlap", "E": "equal"}
    assert all(I.HALVES_FALLBACK[("auc", reads[c])] == V.KEEPS[c] for c in V.DECIDED)
    # the figures the plan's outcome, README and the report give
    flat = lambda p: " ".join((ROOT / p).read_text().split())  # noqa: E731
    plan, readme = flat("bench/results/real_shadows_seventh_plan.md"), flat("README.md")
    g = {c: per_pool["G"][c]["rules"]["D4"] for c in V.DECIDED}
    a, e, b = seven["A"], seven["E"], g["B"]
    assert sum(v < 0.93 for v in head.values()) == 3
    assert a["min"] == pytest.approx(np.mean(list(head.values())), abs=5e-4)  # the headline key is A's lowest
    for text_ in (plan, readme):
        assert (f"class A {g['A']['coverage']:.3f} on pool G, {a['coverage']:.3f} over seven pools "
                f"(lowest key {a['min']:.3f})") in text_
        assert (f"class E {g['E']['coverage']:.3f} on pool G, {e['coverage']:.3f} over seven pools "
                f"(lowest key {e['min']:.3f})") in text_
        assert f"where V_h's floor is free {b['free']:.3f}" in text_
