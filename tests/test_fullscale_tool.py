"""tools/fullscale.py --resume: an earlier run's worktree moves to a newer commit and keeps
its dvc.lock and the outputs git also tracks (so `dvc repro` reruns only the stages whose
dependencies changed), in a real
git repository with a real worktree."""
import json
import subprocess

from conftest import load_script


def _tool():
    return load_script("tools/fullscale.py")


def _git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_resume_moves_the_worktree_and_keeps_the_runs_lock(tmp_path):
    repo, work = tmp_path / "repo", tmp_path / "work"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    (repo / "dvc.lock").write_text("default lock\n")
    (repo / "report.md").write_text("the default run's report\n")  # a tracked output
    (repo / "code.py").write_text("v = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "a")
    first = _git(repo, "rev-parse", "HEAD")
    _git(repo, "worktree", "add", "--detach", str(work), first)
    (work / "dvc.lock").write_text("the full-scale run's lock\n")  # what the run wrote
    (work / "params.yaml").write_text("changed by the run\n")
    (work / "out.bin").write_text("an output\n")
    (work / "report.md").write_text("the full-scale report\n")
    (work / "timing_rows.json").write_text(json.dumps([{"stage": "shadow", "seconds": 1.0,
                                                        "peak_pss_mib": 2}]))
    (repo / "code.py").write_text("v = 2\n")
    (repo / "report.md").write_text("a newer default report\n")
    _git(repo, "commit", "-qam", "b")
    second = _git(repo, "rev-parse", "HEAD")
    prior = _tool()._checkout(work, second)
    assert _git(work, "rev-parse", "HEAD") == second
    assert (work / "code.py").read_text() == "v = 2\n"
    assert (work / "dvc.lock").read_text() == "the full-scale run's lock\n"
    assert (work / "out.bin").is_file()
    # a tracked output keeps the run's version (else DVC would rerun the stage making it)
    assert (work / "report.md").read_text() == "the full-scale report\n"
    assert prior == {"commit": first, "stages": [{"stage": "shadow", "seconds": 1.0,
                                                  "peak_pss_mib": 2}]}
