"""The real DVC pipeline end to end on tiny params, in a temporary git repository."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ENV, ROOT, merge, sh

TINY = {
    "pool_size": 200,
    "data": {"test_size": 60},
    "train": {"epochs": 2, "batch_size": 32, "checkpoints": [1]},
    "shadow": {"n_models": 6},
    "attack": {"bootstrap": 20, "model_bootstrap": 20, "rmia_population": 40},
    "grads": {"chunk_size": 64},
}
@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A tiny copy of the project with `dvc repro` already run and committed."""
    work = tmp_path_factory.mktemp("repo")
    for name in ("dvc.yaml", "stages", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    shutil.rmtree(work / "src" / "bnmem.egg-info", ignore_errors=True)
    (work / "data" / "replicates").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "replicates" / "README.md", work / "data" / "replicates")
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), TINY)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (work / ".gitignore").write_text("__pycache__/\n")
    sh(work, "git", "init", "-q")
    sh(work, "dvc", "init", "-q")
    sh(work, "dvc", "config", "core.autostage", "true")
    shutil.copytree(ROOT / ".dvc" / "plots", work / ".dvc" / "plots")  # the vega-lite templates
    shutil.copy(ROOT / "dvc_plots_template.html", work)  # offline page (vendored vega)
    sh(work, "dvc", "config", "plots.html_template", "../dvc_plots_template.html")
    log = sh(work, "dvc", "repro")
    (work.parent / "repro.log").write_text(log.stdout + log.stderr)  # outside the repo
    sh(work, "git", "add", "-A")
    sh(work, "git", "commit", "-qm", "tiny run")
    return work


HEADLINE = {  # metrics/: what `dvc metrics diff` shows a reviewer (about 40 values)
    "metrics/train.json": ("test_acc", "clean_train_acc", "flipped_mem_acc", "ood_mem_acc"),
    "metrics/attack.json": ("auc_all", "auc_clean", "auc_flipped", "auc_ood",
                            "tpr_at_fpr_1e-3_all", "null_auc", "epsilon_lo_all"),
}


def leaves(d) -> int:
    return sum(leaves(v) for v in d.values()) if isinstance(d, dict) else 1


def restore_head(repo: Path) -> None:
    """The committed state, files and DVC outputs, whatever a test changed: every test that
    changes the repo ends with this, so the tests hold in any order (make test shuffles
    them). The index is emptied first: DVC rewrites dvc.lock within the same second and at
    the same size (0.05 -> 0.01), and git's stat cache would then take the changed file for
    the committed one. Replicate records of extra seeds are outputs the committed dvc.lock
    does not know (`dvc checkout` leaves them), and the report reads their folder."""
    sh(repo, "git", "rm", "-r", "-q", "--cached", ".")
    sh(repo, "git", "checkout", "-q", "HEAD", "--", ".")
    for extra in (repo / "data" / "replicates").iterdir():
        if extra.is_dir():  # the committed run has seeds: [], so no replicate outputs
            shutil.rmtree(extra)
    sh(repo, "dvc", "checkout", "-q")


@pytest.mark.slow
def test_stages_load_torch_only_where_they_run_a_model(repo):
    """Each stage logs what computed its numbers ("<stage> kernels: ...; torch <level>"):
    prepare, attack and report run no model and never import torch (1.4-2.1 s of a stage's
    start on Zen 5), nor does exposure without your own model (the targets' query logits
    come from the train stage), nor grads for a LeNet on the CPU (bnmem.native.arrays);
    the train and shadow stages do."""
    lines = [ln for ln in (repo.parent / "repro.log").read_text().splitlines() if " kernels: C [" in ln]
    torch_of = {}
    for ln in lines:
        stage = ln.split(" kernels: ")[0].split()[-1]
        torch_of.setdefault(stage, set()).add(ln.rsplit("; torch ", 1)[1])
    for stage in ("prepare", "attack", "report", "exposure", "grads"):
        assert torch_of[stage] == {"not imported"}, (stage, torch_of[stage])
    for stage in ("train", "shadow"):
        assert "not imported" not in torch_of[stage], (stage, torch_of[stage])


@pytest.mark.slow
def test_repro_writes_contract_outputs(repo):
    pool = np.load(repo / "data/prepared/pool.npz", allow_pickle=False)
    assert pool["x"].dtype == np.uint8 and pool["x"].shape == (200, 1, 28, 28)
    assert (pool["kind"] == 1).sum() == 10 and (pool["kind"] == 2).sum() == 2
    shard = np.load(repo / "data/shadow/batchnorm/shard_0.npz", allow_pickle=False)
    assert shard["logits"].shape == (6, 200, 2, 10) and shard["logits"].dtype == np.float32
    assert np.all(shard["keep"].sum(0) == 3)
    attack = json.loads((repo / "results/attack.json").read_text())
    for arm in ("none", "batchnorm", "batchnorm_reg"):
        for name in ("lira_online", "lira_offline", "lira_online_fixed", "lira_offline_fixed"):
            m = attack[arm][name]["all"]
            assert 0 <= m["auc"] <= 1 and {"balanced_acc", "tpr_at_fpr_1e-3", "tpr_at_fpr_1e-2"} <= set(m)
    membership = json.loads((repo / "results/membership.json").read_text())
    assert membership["variant"] == "lira_online_fixed" and membership["pairs"] == 3
    assert len(membership["arms"]["none"]["epoch"]["fit"]) == 2
    assert "matched_fit" in membership["compare"]["batchnorm_minus_none"]
    # 600 negatives: TPR at 1e-3 unsupported in every arm and in every difference at equal
    # epochs (frontier.require_support): no value, interval, rule or arms; its design SDs and
    # df kept (here none: at 600 negatives no draw has a TPR at 1e-3 either)
    for rec in [membership["arms"][a]["tpr_low_all"] for a in membership["arms"]] + [
            c["equal_epochs"]["tpr_low_all"] for c in membership["compare"].values()]:
        assert (rec["value"], rec["lo"], rec["hi"], rec["rule"]) == (None,) * 4, rec
        assert "arms" not in rec and {"sd", "df"} <= set(rec), rec
    assert not membership["arms"]["none"]["tpr_low_support"]["supported"]
    assert shard["epoch_phi"].shape == (6, 2, 200) and shard["epoch_correct"].dtype == bool
    # headline metrics: small, every key present, detail in results/
    total = 0
    for path, keys in HEADLINE.items():
        met = json.loads((repo / path).read_text())
        for arm in ("none", "batchnorm", "batchnorm_reg"):
            assert set(met[arm]) == set(keys), path
        total += leaves(met)
    deltas = json.loads((repo / "metrics/deltas.json").read_text())
    assert set(deltas["batchnorm_minus_none"]) == {"auc_identity_equal_epochs",
                                                        "auc_all_matched_heldout"}
    assert set(deltas["batchnorm_reg_minus_batchnorm"]) == {"fz_flipped_matched_heldout",
                                                           "out_acc_clean_equal_epochs"}
    # annealed endpoints: default budgets [1, 2, 4] at 2 epochs -> one extra, complete run
    assert shard["budget_logits"].shape == (6, 1, 200, 2, 10) and list(shard["budgets"]) == [1]
    fr = membership["frontier"]
    assert fr["budgets"] == [1, 2] and fr["primary"] == "heldout"
    assert [e["epochs"] for e in fr["arms"]["none"]["endpoints"]] == [1, 2]
    crit = fr["compare"]["batchnorm_minus_none"]["criteria"]
    assert set(crit) == {"heldout", "fit", "loss", "gap"}
    assert (deltas["batchnorm_minus_none"]["auc_all_matched_heldout"]["value"]
            == crit["heldout"]["figures"]["auc_all"]["at_common"]["value"])
    total += leaves(deltas)
    assert total <= 45, total
    assert sorted(p.name for p in (repo / "metrics").iterdir()) == ["attack.json", "deltas.json",
                                                                     "train.json"]
    summary = json.loads((repo / "results/summary.json").read_text())
    assert summary["seeds"] is None and summary["claims"]
    assert summary["train"]["batchnorm"]["gamma_sigma"]["norm1"]["type"] == "conv"
    assert (repo / "results/theory.json").is_file()
    # the CPU pin is in effect inside a stage process (bnmem.core.cpu)
    meta = json.loads((repo / "data/models/none.json").read_text())
    from bnmem.core import cpu
    import torch
    assert meta["cpu_kernels"] == {"level": cpu.level(),  # as this process, same environment
                                   "torch": torch.backends.cpu.get_cpu_capability()}
    if cpu.level() == "avx2" and os.environ.get("ATEN_CPU_CAPABILITY") == "avx2":
        assert meta["cpu_kernels"]["torch"] == "AVX2"  # the pin, in a real stage process
    report = (repo / "report.md").read_text()
    assert "## Across seeds" not in report  # one seed: no across-seed section
    assert "## Privacy–utility frontier (annealed endpoints)" in report
    # empirical epsilon per arm and endpoint, every arm against BN at matched held-out accuracy
    eps = membership["arms"]["batchnorm"]["empirical_epsilon"]
    assert set(eps) == {"all", "flipped", "ood"} and eps["all"]["epsilon_lo"] >= 0
    assert eps["all"]["members"] == 6 * 100 and eps["all"]["nonmembers"] == 6 * 100
    assert len(fr["arms"]["none"]["empirical_epsilon"]) == 2  # one per endpoint
    assert [r["arm"] for r in membership["mitigations"]] == ["none", "batchnorm_reg"]
    assert "## What to use instead of BN (matched held-out accuracy)" in report
    assert "## DP-SGD arms" not in report  # no DP arm here
    assert "![frontier](plots/report/frontier.png)" in report
    frontier_csv = (repo / "plots/report/frontier.csv").read_text().splitlines()
    assert frontier_csv[0].startswith("arm,epochs,out_acc_clean") and len(frontier_csv) == 7
    links = [line.split("](")[1].rstrip(")") for line in report.splitlines() if line.startswith("![")]
    assert len(links) >= 5
    for link in links:
        png = (repo / link).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, link
    status = sh(repo, "dvc", "status").stdout
    assert "up to date" in status, status


@pytest.mark.slow
def test_dvclive_records_equal_the_curves_and_are_step_plots(repo):
    """train@<arm> logs every epoch through dvclive (dvcyaml=None: dvc.yaml untouched);
    its step plots hold the CSV's numbers, carry no timestamps (the folder is reproducible),
    and `dvc plots show` lists them."""
    import pandas as pd
    for arm in ("none", "batchnorm", "batchnorm_reg"):
        live = repo / "dvclive" / "train" / arm
        curves = pd.read_csv(repo / "plots" / "train" / f"{arm}.csv")
        summary = json.loads((live / "metrics.json").read_text())
        assert summary["step"] == len(curves) == 2
        for key in ("loss", "clean_train_acc", "test_acc"):
            tsv = pd.read_csv(live / "plots" / "metrics" / f"{key}.tsv", sep="\t")
            assert list(tsv.columns) == ["step", key], tsv.columns  # no timestamp column
            assert list(tsv["step"]) == [1, 2]
            np.testing.assert_allclose(tsv[key], curves[key], rtol=1e-5)
            assert summary[key] == pytest.approx(curves[key].iloc[-1], rel=1e-5)
    assert (repo / "dvc.yaml").read_text() == (ROOT / "dvc.yaml").read_text()  # not edited
    shown = sh(repo, "dvc", "plots", "show", "--json").stdout
    assert "dvclive/train/batchnorm/plots/metrics/test_acc.tsv" in shown, shown[:2000]


@pytest.mark.slow
def test_plots_show_writes_html(repo, tmp_path):
    sh(repo, "dvc", "plots", "show", "-o", str(tmp_path / "html"))
    html = (tmp_path / "html" / "index.html").read_text()
    for name in ("roc.png", "memorization.png", "lira_vs_fit.png", "memorization_vs_epoch",
                 "roc_headline", "lira_vs_fit", "grad_norm_hist"):
        assert name in html, name
    assert "cdn.jsdelivr" not in html  # the vendored scripts, not the CDN


@pytest.mark.slow
def test_exp_run_set_param_and_metrics_diff(repo):
    """`dvc exp run -S` on a knob that reruns one arm (not every stage: the DVC mechanics
    are the same, the run a third), then `dvc exp show` and `dvc metrics diff` see it."""
    try:
        exp_run_and_sweep(repo)
    finally:  # `dvc exp run` leaves its result in the workspace
        restore_head(repo)


def exp_run_and_sweep(repo: Path) -> None:
    sh(repo, "dvc", "exp", "run", "-S", "reg_strength=0.37")
    shown = json.loads(sh(repo, "dvc", "exp", "show", "--json").stdout)
    text = json.dumps(shown)
    assert "reg_strength" in text and "0.37" in text and "flipped_mem_acc" in text
    diff = json.loads(sh(repo, "dvc", "metrics", "diff", "--json").stdout)
    changed = {k for f in diff.values() for k in f}
    assert any(k.startswith("batchnorm_reg.") for k in changed), changed
    assert not any(k.startswith(("none.", "batchnorm.")) for k in changed), changed
    # the sweep tool tabulates that experiment (`make sweep` runs the same with --queue)
    out = repo / "sweep_test"
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "sweep.py"), "reg_strength", "0.37",
                          "--no-run", "--out", str(out)], cwd=repo, env=ENV,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = out.with_suffix(".md").read_text().splitlines()
    header = [c.strip() for c in lines[[l.startswith("| reg_strength | arm") for l in lines].index(True)]
              .strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in l.strip("|").split("|")))) for l in lines
            if l.startswith("| 0.37")]
    arms = [r for r in rows if r["arm"] in ("none", "batchnorm", "batchnorm_reg")]
    assert {r["arm"] for r in arms} == {"none", "batchnorm", "batchnorm_reg"}, rows
    for r in arms:  # TPR at 1e-3 is unsupported at 6 shadows ("-"): every other figure is there
        assert all(r[c] not in ("-", "None", "") for c in header if c != "tpr_at_fpr_1e-3_all"), r
    assert any(r["arm"] == "batchnorm_minus_none" for r in rows), rows  # the deltas' pair column
    assert out.with_suffix(".png").stat().st_size > 10_000
    (out.with_suffix(".md")).unlink(), out.with_suffix(".png").unlink()
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "sweep.py"), "reg_strength", "0.5",
                          "--no-run", "--out", str(out)], cwd=repo, env=ENV,
                         capture_output=True, text=True)
    assert res.returncode != 0 and "reg_strength = 0.5" in res.stderr, res.stderr




@pytest.mark.slow
def test_bad_value_from_exp_run_loses_nothing(repo):
    """`dvc exp run -S noise_rate=1.5`: one line naming the key, exit != 0, and every output
    (the recipes included: DVC deletes a stage's outputs before running it unless they
    persist) still there; restoring params.yaml leaves the pipeline up to date."""
    before = {p: p.read_bytes() for p in (repo / "data" / "recipes").glob("*.yaml")}
    res = subprocess.run(["dvc", "exp", "run", "-S", "noise_rate=1.5"], cwd=repo, env=ENV,
                         capture_output=True, text=True)
    try:
        assert res.returncode != 0
        errors = [l for l in res.stdout.splitlines() + res.stderr.splitlines()
                  if l.startswith("bnmem ")]
        assert errors == ["bnmem configure: error: noise_rate: 1.5 is invalid; valid: a number "
                          "in [0, 1)"], res.stdout + res.stderr
        assert before and {p: p.read_bytes() for p in before} == before
    finally:
        restore_head(repo)
    assert "up to date" in sh(repo, "dvc", "status").stdout


@pytest.mark.slow
def test_reg_strength_reruns_only_the_reg_arm(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["reg_strength"] = 0.37
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        sh(repo, "dvc", "repro", "configure")
        dry = sh(repo, "dvc", "repro", "--dry").stdout
        ran = {l.split("'")[1] for l in dry.splitlines() if l.startswith("Running stage")}
        assert "train@batchnorm_reg" in ran and "shadow@batchnorm_reg-0" in ran
        assert not {s for s in ran if s.endswith("@none") or s.endswith("@batchnorm")
                    or s.endswith("@none-0") or s.endswith("@batchnorm-0")}, ran
    finally:
        restore_head(repo)


@pytest.mark.slow
def test_shadow_backend_leaves_every_stage_up_to_date(repo):
    """Where shadows run is not what they compute: switching to the dask backend (with
    resources, retries and TLS files) reruns configure, which writes the same recipes, and
    nothing else; no cluster is needed to find that out."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["shadow"].update(backend="dask", resources={"GPU": 0.25}, retries=5,
                            tls={"ca_file": "ca.pem", "cert": "c.pem", "key": "k.pem"})
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        sh(repo, "dvc", "repro", "configure")
        assert not sh(repo, "git", "status", "--porcelain", "data/recipes").stdout.strip()
        dry = sh(repo, "dvc", "repro", "--dry").stdout
        ran = [l for l in dry.splitlines() if l.startswith("Running stage")]
        assert not ran, dry
    finally:
        restore_head(repo)


@pytest.mark.slow
def test_extra_seeds_run_only_replicates_and_give_intervals(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["seeds"] = [1]  # one extra seed: the same mechanics as two, half the runs
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        sh(repo, "dvc", "repro", "configure")
        dry = sh(repo, "dvc", "repro", "--dry").stdout
        ran = {l.split("'")[1] for l in dry.splitlines() if l.startswith("Running stage")}
        assert {f"replicate@{a}-{s}" for a in ("none", "batchnorm", "batchnorm_reg")
                for s in (1,)} <= ran
        assert not {s for s in ran if s.startswith(("train@", "shadow@", "grads@"))}, ran
        sh(repo, "dvc", "repro")
        rec = json.loads((repo / "data/replicates/batchnorm/seed_1.json").read_text())
        assert rec["seed"] == 1 and len(rec["record"]["curve"]) == 2
        seeds = json.loads((repo / "results/summary.json").read_text())["seeds"]
        assert seeds["seeds"] == [0, 1] and seeds["n"] == 2
        auc = seeds["delta_batchnorm_minus_none"]["auc_all"]
        assert set(auc["values"]) == {"seed_0", "seed_1"}
        assert auc["lo"] <= auc["mean"] <= auc["hi"] and len(set(auc["values"].values())) == 2
        assert "## Across seeds" in (repo / "report.md").read_text()
    finally:
        restore_head(repo)
