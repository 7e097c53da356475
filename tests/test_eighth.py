"""bench/real_shadow_sixth.py, real_shadow_seventh.py and real_shadow_eighth.py: a sixth,
seventh and eighth fresh pool re-check D4 for the AUC classes
(bench/results/real_shadows_sixth_plan.md, real_shadows_seventh_plan.md), and the eighth
(real_shadows_eighth_plan.md) jacksum against theta_full for the memorization keys. The three
tables regenerate byte for byte from one load of the committed stores (and
results/real_shadows_eighth.json), the pipeline follows the eighth's decisions, and the plans,
README and report quote their figures."""
import numpy as np
import pytest

from conftest import ROOT, load_script

E = load_script("bench/real_shadow_eighth.py")


def flat(path: str) -> str:
    return " ".join((ROOT / path).read_text().split())


def _cell(**kw) -> dict:
    """A class cell that passes every gate, with fields overridden by kw."""
    c = {"coverage": 0.95, "min": 0.94, "free": 0.95, "bound": 0.95, "n_bound": 100,
         "ts15": {"min": 0.93}, "b8": {"coverage": 0.95}, "emp": {"coverage": 0.95}}
    return {**c, **kw}


def test_the_plans_gates_drop_only_the_upper_end_of_the_split():
    """split_upper=False: over-coverage where V_h's floor is free or binds no longer fails a
    rule; under-coverage there still does, and so does every other gate, both ends."""
    floors = (0.91, 0.90)
    assert E.gates(_cell(), floors, True) == (True, "") == E.gates(_cell(), floors, False)
    for field in ("free", "bound"):
        assert not E.gates(_cell(**{field: 0.975}), floors, True)[0]
        assert E.gates(_cell(**{field: 0.975}), floors, False)[0]
        assert not E.gates(_cell(**{field: 0.925}), floors, False)[0]
    assert E.gates(_cell(bound=0.90, n_bound=49), floors, False)[0]  # too few records to judge
    for bad in (_cell(coverage=0.975), _cell(coverage=0.925), _cell(min=0.905),
                _cell(ts15={"min": 0.895}), _cell(b8={"coverage": 0.975}),
                _cell(emp={"coverage": 0.925})):
        assert not E.gates(bad, floors, False)[0]


def _sixth_and_seventh(loaded: tuple[dict, dict]) -> None:
    """The sixth and seventh tables regenerate byte for byte from the same stores; the sixth
    reverted class A, the seventh adopted D4 for classes A and E and kept `both` for B (the
    eighth then adopted it for B); the plan and README quote the seventh's figures."""
    S, V = E.S, E.V
    import real_shadow_keypooled as K
    from bnmem.attack import intervals as I
    every, every_table = loaded
    pools = {name: every[name] for name, _, _ in V.POOLS}
    per_pool = {name: every_table[name] for name in pools}
    assert list(pools)[:6] == [name for name, _, _ in S.POOLS]
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
    # (below); the seventh's fallbacks are still the fallbacks
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


@pytest.mark.slow  # eight pools' stores and pooled cells, and the full reads (about 25 s)
def test_the_sixth_seventh_and_eighth_outcomes_follow_from_the_stores():
    """The three fresh-pool tables from one load of the eight pools (the sixth's and
    seventh's: _sixth_and_seventh); then the eighth's decisions, the pipeline following them,
    and the plan, README and report quoting them."""
    loaded = E.S.load_tables(E.POOLS)
    _sixth_and_seventh(loaded)
    mem_loaded = E.F.load_all()
    auc, r = E.auc_part(E.POOLS, loaded)
    mem, m = E.memorization_part(E.POOLS, mem_loaded)
    text = auc + "\n\n" + "\n".join(mem) + "\n"
    assert text == (ROOT / "bench/results/real_shadows_eighth.md").read_text()
    auc_g, rg = E.auc_part(E.V.POOLS, loaded)
    mem_g, _ = E.memorization_part(E.V.POOLS, mem_loaded)
    assert auc_g + "\n\n" + "\n".join(mem_g) + "\n" == \
        (ROOT / "bench/results/real_shadows_eighth_as_of_G.md").read_text()
    dec, pooled, head = r["decision"], r["pooled"], r["headline"]
    assert all(dec[c]["d4"] for c in "ABE")
    assert all(dec[c]["old"][0][0] and dec[c]["old"][1][0] for c in "ABE")  # the old gates too
    assert rg["decision"]["B"]["d4"] and not rg["decision"]["B"]["old"][0][0]  # as of G: the change decided B
    # the pipeline: D4 for the three classes' all-sample AUC reads as the eighth left them,
    # the old rules as fallbacks; the common point back to jacksum since the tenth plan, and
    # to D4's Satterthwaite form since the eleventh
    from bnmem.attack import intervals as I
    for read, old in (("common", "jacksum"), ("overlap", "both"), ("equal", "jacksum")):
        assert I.MIXED_RULES[("auc", read)] == ("delete4_halves_s" if read == "common" else "delete4_halves")
        assert I.HALVES_FALLBACK[("auc", read)] == old
    assert I.DELETED_STUDIED[("auc", "overlap")] == I.DELETED_STUDIED[("auc", "common")]
    # memorization: K1 passes, K2 fails gate 2
    K1, K2 = E.F.KEYS
    md, f = m["decision"], m["figures"]
    assert md[K1]["passes"] and md[K2]["gate1"] and not md[K2]["gate2"]
    # the figures the plan, README and report quote
    plan, readme = flat("bench/results/real_shadows_eighth_plan.md"), flat("README.md")
    from bnmem.report.markdown import _procedure_text
    proc = " ".join(_procedure_text("mixed", 100, 8).split())
    report = flat("report.md")
    h = {c: r["per_pool"]["H"][c]["rules"]["D4"] for c in "ABE"}
    a, b, e = pooled["A"], pooled["B"], pooled["E"]
    hl = float(np.mean(list(head.values())))
    assert a["min"] == pytest.approx(hl, abs=5e-4) and sum(v < 0.93 for v in head.values()) == 3
    assert f"{100 * (0.95 - hl):.1f}" == "1.4"  # "about 1.4 points short"
    need_h = 8 * 0.93 - sum(v for p_, v in head.items() if p_ != "H")
    assert f"headline key needed {need_h:.3f} for it" in readme
    assert f"class B by 0.001 (0.969 where the floor is free)" in readme
    assert f"{h['B']['free']:.3f}" == "0.969" and 0.97 - h["B"]["free"] < 0.0015
    for cls, word in (("A", "D4 stays"), ("B", "D4 adopted"), ("E", "D4 stays")):
        c, p = h[cls], pooled[cls]
        assert f"| {c['coverage']:.3f} (lowest key {c['min']:.3f}" in plan
        assert f"| {p['coverage']:.3f} (lowest key {p['min']:.3f}): passes | **{word}** |" in plan
    assert (f"class A {h['A']['coverage']:.3f} on pool H, {a['coverage']:.3f} over eight pools (lowest key "
            f"{a['min']:.3f}); class E {h['E']['coverage']:.3f} on pool H, {e['coverage']:.3f} over eight "
            f"pools (lowest key {e['min']:.3f})") in readme
    assert (f"B {h['B']['coverage']:.3f} on pool H, {b['coverage']:.3f} over eight pools (lowest key "
            f"{b['min']:.3f})") in readme
    assert f"The headline key covers {head['H']:.3f} on pool H and {hl:.3f} over the eight" in readme
    # the rule list's and the report's AUC figures are the ten pools' since the tenth plan
    # (tests/test_tenth.py)
    # memorization in the report and README
    th1, th2 = f[K1]["theta"], f[K2]["theta"]
    # K2 under jacksum over eight pools (the report now leads with jacksum_s over ten: test_tenth)
    assert (f"over nine), the rule before it ({md[K2]['pooled']:.3f} over eight pools, "
            f"{np.mean(f[K2]['mu']):.3f} taking as truth the mean of the 8-pair reads") in report
    assert f"{min(th2):.3f}–{max(th2):.3f} per pool" in " ".join(
        (ROOT / "bench/results/real_shadows_eighth_plan.md").read_text().split())
    assert (f"Against that mean jacksum covers it {np.mean(f[K1]['mu']):.3f} over eight pools "
            f"({min(f[K1]['mu']):.2f}-{max(f[K1]['mu']):.2f} per pool)") in report
    assert f"{md[K1]['pooled']:.3f} over eight pools ({min(th1):.3f}-{max(th1):.3f};" in report
    bias = [-x for x in f[K1]["bias"]]
    assert f"lies {min(bias):.2f}-{max(bias):.2f} of a run's SD below the read on all" in report
    rs = np.array(f[K1]["run_skew"])
    sk, rest = np.array(th1)[rs < -2], np.array(th1)[rs >= -2]
    assert len(sk) == 5 and (f"covers {sk.mean():.3f} ({sk.min():.3f}-{sk.max():.3f} per pool: D, F and H "
                             f"under 0.93, C and B above 0.95), over the other three {rest.mean():.3f}") in report
    labels = [d["label"] for d in mem_loaded[0]] + ["H"]
    assert sorted(lb for lb, x in zip(labels, th1) if x < 0.93) == ["D", "F", "H"]
    assert sorted(lb for lb, x, r_ in zip(labels, th1, rs) if r_ < -2 and x > 0.95) == ["B", "C"]
    margin = md[K1]["fresh"] - E.F.FRESH_FLOOR
    assert f"passing its 0.90 gate by {margin:.3f}" in report
    need = {k: 8 * E.F.POOLED_FLOOR - sum(f[k]["theta"][:7]) for k in (K1, K2)}
    assert f"gate 2 needed only {need[K1]:.3f} from it" in report and f"needed only {need[K1]:.3f} from it" in readme
    assert (f"judged runs −{-rs[-1]:.2f}; the 8-pair mean {-f[K1]['bias'][-1]:.2f} SD below theta_full, "
            f"jacksum covering that mean {f[K1]['mu'][-1]:.3f}") in readme
    assert f"eighth's were skewed and it covered {md[K1]['fresh']:.3f}" in report
    assert (f"**K1 (matched held-out accuracy) passes** ({md[K1]['fresh']:.3f} on pool H, "
            f"{md[K1]['pooled']:.3f} over eight)") in readme
    assert (f"**K2 (matched fit) fails again** ({md[K2]['fresh']:.3f} on pool H, {md[K2]['pooled']:.3f} "
            "over eight") in readme
    assert (f"jacksum covers K1 {sk.mean():.3f} ({sk.min():.3f}–{sk.max():.3f} per pool: D, F and H under "
            f"0.93, C and B above 0.95), over the other three {rest.mean():.3f}") in readme
    assert f"| {md[K1]['fresh']:.3f} (passes) | {md[K1]['pooled']:.3f} (passes) |" in plan
    assert f"| {md[K2]['fresh']:.3f} (passes) | **{md[K2]['pooled']:.3f} (fails)** |" in plan
