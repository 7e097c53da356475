"""Every interval README.md quotes for the default run comes from the committed report.md
(so a rerun that moves a number fails here until README follows)."""
import re

from conftest import ROOT

INTERVAL = re.compile(r"[+−-]?\d+\.\d+ \[[+−-]?\d+\.\d+, [+−-]?\d+\.\d+\]")


def _norm(text: str) -> str:
    return text.replace("−", "-")


def test_readme_default_run_numbers_come_from_the_report():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## What the default run shows")
    section = readme[start:readme.index("\n## ", start + 10)]
    quoted = INTERVAL.findall(section)
    assert len(quoted) >= 4, "the section quotes its intervals"
    report = _norm((ROOT / "report.md").read_text())
    missing = [q for q in quoted if _norm(q) not in report]
    assert not missing, f"README quotes intervals report.md does not hold: {missing}"
