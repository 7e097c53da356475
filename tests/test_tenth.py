"""The tenth plan (bench/results/real_shadows_tenth_plan.md): a tenth pool (J) re-checks D4
for the AUC classes and jacksum_s for memorization at the common point. Its tables
regenerate from the committed stores, the check made before pool J reproduces the eighth
and ninth plans' figures, and the plan quotes the exploratory figures the script recomputes."""
import numpy as np
import pytest

from conftest import ROOT, load_script

T = load_script("bench/real_shadow_tenth.py")
flat = lambda p: " ".join((ROOT / p).read_text().split())  # noqa: E731


def _as_of_h():
    got = T.S.load_tables(T.E.POOLS)
    auc, r = T.auc_part(T.E.POOLS, got)
    pools, full = T.mem_load("H")
    checks = T.check_stores(T.E.POOLS, r["pools"], pools, full)
    mem, m = T.mem_part(pools, full)
    rep, x = T.reported(r["pools"], pools, full)
    return auc + "\n\n" + checks + "\n\n" + "\n".join(mem) + "\n\n" + "\n".join(rep) + "\n", r, m, x


@pytest.mark.slow  # eight pools' AUC and memorization stores (about 30 s)
def test_the_check_before_pool_j_follows_from_the_stores():
    """The as-of-H table regenerates byte for byte; its AUC rows are the eighth table's and
    its memorization figures the ninth's as of H; the plan's exploratory figures are the
    reported section's."""
    text, r, m, x = _as_of_h()
    assert text == (ROOT / "bench/results/real_shadows_tenth_as_of_H.md").read_text()
    eighth = (ROOT / "bench/results/real_shadows_eighth.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith(("| A:", "| B:", "| E:", "- A:", "- B:", "- E:"))
            and "Satterthwaite" not in ln]
    assert rows and all(ln in eighth for ln in rows[:6])  # pool H alone and the eight pools
    ninth = (ROOT / "bench/results/real_shadows_ninth_as_of_H.md").read_text()
    assert f"jacksum_s {m['decision']['class']:.3f} (lowest key {m['decision']['lowest']:.3f})" in ninth
    plan = flat("bench/results/real_shadows_tenth_plan.md")
    hd = x["headline"]
    vt = [v["v_over_t"] for v in hd.values()]
    rsd = [np.sqrt(2 / v["df"]) for v in hd.values()]
    assert f"is {min(vt):.2f}–{max(vt):.2f} per pool" in plan
    assert f"relative SD over a pool's 200 subsets is {min(rsd):.2f}–{max(rsd):.2f}, about {np.mean([v['df'] for v in hd.values()]):.0f}" in plan
    d4s = x["d4s"]
    assert f"the headline key {np.mean(d4s[T.S.HEADLINE]):.3f}" in plan
    a_keys = T.H.class_keys(next(iter(r["pools"].values())), "A")
    matched = [np.mean(d4s[k]) for k in a_keys if k.endswith("matched")]
    fit = [np.mean(d4s[k]) for k in a_keys if k.endswith("fit")]
    assert f"class A's three matched keys {min(matched):.3f}–{max(matched):.3f}, its fit keys {min(fit):.3f}–{max(fit):.3f}" in plan
    for cls in "BE":
        ks = [np.mean(d4s[k]) for k in T.H.class_keys(next(iter(r["pools"].values())), cls)]
        assert f"class {cls}'s {'keys ' if cls == 'B' else ''}{min(ks):.3f}–{max(ks):.3f}" in plan
    pt = x["parts"]
    others = [v[0] for k, v in pt.items() if k != T.K1]
    # the plan breaks the line after the dash
    assert f"mean V_j / T_p {min(others):.2f}– {max(others):.2f} on eleven keys, {pt[T.K1][0]:.2f} on K1" in plan
    assert f"mean V_S / T_s {min(v[1] for v in pt.values()):.1f}–{max(v[1] for v in pt.values()):.1f} per key" in plan
    assert f"mean V_h / T_s {np.mean([v[2] for v in pt.values()]):.2f}" in plan
    jm = {k: np.mean(v["cov"]) for k, v in x["jh"].items()}
    ratios = [np.mean(v["ratio"]) for v in x["jh"].values()]
    assert (f"the class covers {np.mean(list(jm.values())):.3f} (lowest key K2 {jm[T.K2]:.3f}, highest "
            f"{max(jm.values()):.3f})") in plan and min(jm, key=jm.get) == T.K2
    assert f"a mean width {min(ratios):.2f}–{max(ratios):.2f} times `jacksum_s`'s per key" in plan
    js = {k: np.mean(v["JSs"]) for k, v in m["figures"].items() if k not in (T.K1, T.K2)}
    assert f"({min(js.values()):.3f}–{max(js.values()):.3f} under `jacksum_s`)" in plan


def _cell(coverage=0.95, low=0.94, free=0.95, bound=0.95, n_bound=500):
    """A class cell with the fields the gates read (real_shadow_halves.passes)."""
    return {"coverage": coverage, "min": low, "free": free, "bound": bound, "n_bound": n_bound,
            "ts15": {"min": low - 0.01}, "b8": {"coverage": coverage}, "emp": {"coverage": coverage}}


def test_only_under_coverage_reverts_a_class_and_both_fresh_pools_decide():
    """The amended decision: a class reverts when a gate fails on its lower side, on pool I,
    pool J or the ten pools; over-coverage alone keeps D4 and is named."""
    def decide(i=None, j=None, pooled=None):
        per = {p: {c: {"rules": {"D4": cell or _cell()}} for c in "ABE"} for p, cell in (("I", i), ("J", j))}
        return T.auc_decide(per, {c: pooled or _cell() for c in "ABE"}, ("I", "J"))["A"]
    ok = decide()
    assert ok["d4"] and ok["action"] == "D4 stays for class A"
    over = decide(j=_cell(coverage=0.975))
    assert over["d4"] and "over-covers: pool J: pooled 0.975" in over["action"]
    assert not decide(i=_cell(low=0.905))["d4"]  # pool I decides too
    assert "reverts to jacksum (pool J: lowest key 0.905;" in decide(j=_cell(low=0.905))["action"]
    assert not decide(pooled=_cell(low=0.925))["d4"]  # the ten pools' floor is 0.93
    assert decide(i=_cell(low=0.925))["d4"]  # a fresh pool's is 0.91
    assert not decide(j=_cell(free=0.92))["d4"] and decide(j=_cell(free=0.99))["d4"]


def test_the_memorization_caveat_names_each_failing_key_with_its_figures():
    keys = [f"k{i}" for i in range(10)] + [T.K1, T.K2]
    f = {k: {"JSs": [0.95] * 9 + [0.96]} for k in keys}
    assert T.caveat_lines(f, {"class": 0.95}, "J", "ten") == []
    f[T.K2]["JSs"][-1] = 0.905
    f["k3"]["JSs"] = [0.92] * 10
    lines = T.caveat_lines(f, {"class": 0.995}, "J", "ten")
    assert lines[0] == f"`{T.K2}` covered 0.905 on pool J, a fresh pool (floor 0.91), {np.mean(f[T.K2]['JSs']):.3f} over ten pools."
    assert lines[1] == "`k3` covers 0.920 over ten pools (floor 0.93)."
    assert lines[2] == "The class covers 0.995 over ten pools (ceiling 0.99)."


@pytest.mark.slow  # ten pools' AUC and memorization stores and pool J's full read (about 40 s)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_follows_it():
    """The tenth table regenerates byte for byte from the committed stores; the pipeline's
    rules are the ones its decisions leave (D4 for classes A, B and E unless one reverted;
    jacksum_s for memorization at the common point); the plan, README and report quote it."""
    got = T.S.load_tables(T.POOLS)
    auc, r = T.auc_part(T.POOLS, got)
    pools, full = T.mem_load("J")
    checks = T.check_stores(T.POOLS, r["pools"], pools, full)
    mem, m = T.mem_part(pools, full)
    rep, x = T.reported(r["pools"], pools, full)
    text = auc + "\n\n" + checks + "\n\n" + "\n".join(mem) + "\n\n" + "\n".join(rep) + "\n"
    assert text == (ROOT / "bench/results/real_shadows_tenth.md").read_text()
    from bnmem.attack import intervals as I
    dec = r["decision"]
    for cls, read in (("A", "common"), ("B", "overlap"), ("E", "equal")):
        want = "delete4_halves" if dec[cls]["d4"] else T.OTHERWISE[cls]
        if cls == "A":  # reverted to jacksum here; the eleventh plan then adopted D4s (test_eleventh)
            assert want == "jacksum" and I.HALVES_FALLBACK[("auc", read)] == want
            continue
        assert I.MIXED_RULES[("auc", read)] == want, cls
    assert I.MIXED_RULES[("mem", "common")] == "jacksum_s"
    _quotes(r, m, x)


def _quotes(r, m, x):
    """The plan's outcome, README, the rule list and the report quote the tenth table."""
    from bnmem.report.markdown import _procedure_text
    plan, readme, report = (flat("bench/results/real_shadows_tenth_plan.md"), flat("README.md"),
                            flat("report.md"))
    proc = " ".join(_procedure_text("mixed", 100, 8).split())
    per, pooled, head, dec = r["per_pool"], r["pooled"], r["headline"], r["decision"]
    c = lambda p, cls: per[p][cls]["rules"]["D4"]  # noqa: E731
    assert not dec["A"]["d4"] and dec["B"]["d4"] and dec["E"]["d4"]
    assert not any(dec[k]["over"] for k in "ABE")  # no failure on the upper side alone
    hl = float(np.mean(list(head.values())))
    assert pooled["A"]["min"] == pytest.approx(hl, abs=5e-4)
    assert c("I", "A")["min"] == pytest.approx(head["I"], abs=5e-4) and c("J", "A")["min"] == pytest.approx(head["J"], abs=5e-4)
    under = [p for p, v in head.items() if v < 0.93]
    assert f"(under 0.93 on {['', 'one', 'two', 'three', 'four', 'five', 'six'][len(under)]} of the ten: {', '.join(under)})" in plan
    for cls in "ABE":
        a, b, t = c("I", cls), c("J", cls), pooled[cls]
        assert (f"| {a['coverage']:.3f} (lowest key {a['min']:.3f})" in plan or f"| {a['coverage']:.3f} ({a['min']:.3f})" in plan)
        assert (f"| {b['coverage']:.3f} (lowest key {b['min']:.3f})" in plan or f"| {b['coverage']:.3f} ({b['min']:.3f})" in plan)
        assert (f"| {t['coverage']:.3f} (lowest key {t['min']:.3f})" in plan or f"| {t['coverage']:.3f} ({t['min']:.3f})" in plan)
    assert f"at T_s × 1.5 {c('I', 'A')['ts15']['min']:.3f})" in plan
    assert f"lowest key at T_s × 1.5 {pooled['A']['ts15']['min']:.3f} < 0.92" in plan
    b, e = pooled["B"], pooled["E"]
    assert (f"{b['coverage']:.3f} / {e['coverage']:.3f} over ten pools per key, lowest key {b['min']:.3f} / "
            f"{e['min']:.3f}; {c('J', 'B')['coverage']:.3f} / {c('J', 'E')['coverage']:.3f} on the tenth, fresh pool") in proc
    assert f"covered {hl:.3f} over ten pools and {head['I']:.3f} on pool I, fresh for it" in proc
    assert f"covered {hl:.3f} over ten pools and {head['I']:.3f} on a fresh one, about a 93 % interval" in report
    assert f"over the overlap `delete4_halves` stays, {b['coverage']:.3f} over ten pools (lowest key {b['min']:.3f})" in report
    assert (f"below: {b['coverage']:.3f} / {e['coverage']:.3f} over the ten per key over the overlap / at equal "
            f"budgets, lowest key {b['min']:.3f} / {e['min']:.3f}") in readme
    assert f"covered {hl:.3f} over ten pools and {head['I']:.3f} on a fresh one, about a 93 % interval" in readme
    assert (f"its headline key covered {head['I']:.3f} on pool I (floor 0.91; {head['J']:.3f} on J) and {hl:.3f} "
            f"over the ten pools, under 0.93 on five of them") in readme and len(under) == 5
    assert f"lowest key with T_s × 1.5 fell to {pooled['A']['ts15']['min']:.3f} (floor 0.92)" in readme
    assert (f"**D4 stays for class B** ({c('I', 'B')['coverage']:.3f} / {c('J', 'B')['coverage']:.3f} on I / J, "
            f"{b['coverage']:.3f} over ten, lowest key {b['min']:.3f})") in readme
    assert (f"({c('I', 'E')['coverage']:.3f} / {c('J', 'E')['coverage']:.3f}, {e['coverage']:.3f} over ten, lowest key "
            f"{e['min']:.3f})") in readme
    # memorization
    f, md = m["figures"], m["decision"]
    k1, k2 = f[T.K1]["JSs"], f[T.K2]["JSs"]
    assert md["gate1"] and md["gate2"] and not m["failing"]
    assert (f"K2 {k2[-1]:.3f} on J, {np.mean(k2):.3f} over ten pools; K1 {k1[-1]:.3f} / {np.mean(k1):.3f}; the class "
            f"{md['class']:.3f}") in readme
    assert f"- Pool J: K2 {k2[-1]:.3f} (floor 0.91), K1 {k1[-1]:.3f} (floor 0.90)." in plan
    assert f"- Ten pools: lowest key K2 {md['lowest']:.3f}, class {md['class']:.3f}." in plan
    pooled = {k: np.mean(r["JSs"]) for k, r in f.items()}
    assert min(pooled, key=pooled.get) == T.K2 and md["lowest"] == pytest.approx(pooled[T.K2], abs=1e-12)
    assert f"their rule since a ninth pool: {md['class']:.3f} over ten pools" in report
    js2 = f[T.K2]["JS"]
    assert f"where jacksum too would have passed (K2 {js2[-1]:.3f})" in report
    assert f"against {np.mean(js2):.3f} under jacksum over the ten" in report
    assert f"jacksum itself would have passed it too: K2 {js2[-1]:.3f} on J" in readme
    assert (f"covers {np.mean(k2):.3f} over ten pools under `jacksum_s` ({k2[-1]:.3f} on the tenth, fresh one; "
            f"{min(k2):.3f}-{max(k2):.3f} per pool)") in report
    assert f"Under `jacksum_s` it covers {np.mean(k1):.3f} over ten pools ({min(k1):.3f}-{max(k1):.3f} per pool)" in report
    # the reported figures README quotes
    vt = x["vt"]
    others = [v for k, v in vt.items() if k not in (T.S.HEADLINE, "batchnorm_reg_minus_none/auc_matched")]
    hdf = np.mean([v["df"] for v in x["headline"].values()])
    assert (f"(mean V / T {vt[T.S.HEADLINE]:.2f} over the ten; {min(others):.2f}– {max(others):.2f} on the other keys "
            "but BN − none's and reg − none's matched ones)") in readme  # README breaks the line after the dash
    assert f"about {hdf:.0f} effective degrees of freedom there" in readme
    assert f"(Student's t: {2 * T.stats.t.cdf(1.96, hdf) - 1:.3f})" in readme
    d4s = x["d4s"]
    rest = [np.mean(v) for k, v in d4s.items() if k != T.S.HEADLINE]
    assert (f"would have covered the headline key {np.mean(d4s[T.S.HEADLINE]):.3f} (lowest pool "
            f"{min(d4s[T.S.HEADLINE]):.3f}) but the other {len(rest)} keys {min(rest):.3f}–{max(rest):.3f} "
            f"({sum(v > 0.97 for v in rest)} of them over 0.97)") in readme
    pt = x["parts"]
    assert (f"(V_S / T_s {min(v[1] for v in pt.values()):.1f}–{max(v[1] for v in pt.values()):.1f}; V_j / T_p "
            f"{min(v[0] for k, v in pt.items() if k != T.K1):.2f}–{max(v[0] for k, v in pt.items() if k != T.K1):.2f} "
            f"but {pt[T.K1][0]:.2f} on K1)") in readme
    jm = {k: np.mean(v["cov"]) for k, v in x["jh"].items()}
    ratios = [np.mean(v["ratio"]) for v in x["jh"].values()]
    assert (f"brings the class to {np.mean(list(jm.values())):.3f} but K2 to {jm[T.K2]:.3f} at the same mean width "
            f"({min(ratios):.2f}–{max(ratios):.2f}× per key)") in readme
    # README's calibration table: the rows the ten pools measure
    # README's calibration table: the ten pools' figures, then the twelve's (test_twelfth)
    assert f"| `delete4_halves` | {b['coverage']:.3f} over ten pools, lowest key {b['min']:.3f};" in readme
    assert f"| `delete4_halves` | {e['coverage']:.3f} over ten pools, lowest key {e['min']:.3f};" in readme
    assert (f"| `jacksum_s` | {md['class']:.3f} over ten pools against the full read, lowest key "
            f"{md['lowest']:.3f};") in readme and f"two keys {np.mean(k2):.3f} / {np.mean(k1):.3f} over ten pools," in readme


def test_readmes_calibration_table_quotes_the_tables_it_summarizes():
    """Each figure of README's "Where calibration stands" that no ten-pool table gives is
    the one README's source table gives (those tables are checked against their stores:
    tests/test_real_shadows.py, test_interval_text.py, test_readme.py)."""
    readme = flat("README.md")
    at = readme.index("**Where calibration stands**")
    table, before, after = readme[at:readme.index("How well a full-scale interval", at)], readme[:at], readme[at:]
    src = before + after[len(table):]
    # real shadows, pools A / B, the rules of the day (the real-shadow plan's table)
    for cls, rule, cov, wid in (("A: AUC at the common point", "jacksum", "0.990 / 0.995", "1.53 / 1.57"),
                                ("F: memorization at equal budget", "jacksum", "0.979 / 0.983", None),
                                ("D: TPR at 1e-3 at matched utility", "pairs_t", "0.964 / 0.947", None),
                                ("G: TPR at 1e-3 at equal budget", "pairs_t", "0.988 / 0.979", None)):
        assert f"| {cls} | {rule} | {cov} | {wid or ''}" in src, cls
        assert cov in table and (wid is None or f"{wid}× a calibrated width" in table)
    # simulation: seed 21's mixed (the default composition), seed 26's overlap, seed 23's TPR
    assert "| AUC | 0.946 / 0.0506 | 0.958 / 0.0572 | 0.940 / 0.0636 | 0.952 / 0.0466 | 0.952 / 0.0540 |" in src
    assert "| jacksum, its fallback: 0.940 / 0.952 (seed 21) |" in table and "0.958 (seed 21, equal epochs)" in table
    assert "| Feldman–Zhang, flipped | 0.946 / 0.1286 | **0.972** / 0.1169 | **0.972** / 0.1221 | **0.976** / 0.0826 | **0.984** / 0.1082 |" in src
    assert "0.972 / 0.984 (seed 21, flipped)" in table and "0.972 (seed 21, equal epochs)" in table
    assert "| held-out accuracy | 0.936 / 0.0631 | 0.934 / 0.0625 |" in src and "0.936 / 0.934 one arm / difference (seed 21)" in table
    assert "| `pairs_t` (now) | 0.948 / 0.0089 | 0.966 / 0.0090 | **0.962** / 0.0088 | **0.962** / 0.0089 |" in src
    assert "0.962 / 0.962 (seed 23)" in table
    assert "`both`, now the overlap's fallback, 0.942 / 0.958 over their overlap on the confirmation seed" in \
        " ".join(__import__("bnmem.report.markdown", fromlist=["x"])._procedure_text("mixed", 100, 8).split())
    assert "0.942 / 0.958 (seed 26)" in table
    # 32 pairs: seeds 27-29's pairs_t
    assert "0.908 / 0.892 one arm at FPR 1e-3 / 1e-4, 0.918 / 0.928 paired" in src
    assert "`pairs_t` gave 0.914-0.936 (seed 28) and 0.900-0.938 (seed 29)" in src
    # ... and seed 34's (the second 32-pair plan), beside twoway's pooled figures there
    tr = load_script("bench/tpr_rules.py")
    t34 = [tr.table(ROOT / "results" / "tpr32_components_seed34.jsonl", f)["C6"][k]["coverage"]
           for f in ("tpr_low_all", "tpr_vlow_all") for k in ("one_arm", "difference")]
    assert f"`pairs_t` {min(t34 + [0.892]):.3f}–0.938 (seeds 27–29, 34)" in table
    assert "`twoway` 0.959 / 0.962 one arm, 0.952 / 0.957 paired over seeds 29 + 34" in table
    assert "(the jackknife over the 32 pairs carries 75–82 % of its variance" in src
    assert "(the jackknife over 32 pairs carries 75–82 % of its variance" in readme
