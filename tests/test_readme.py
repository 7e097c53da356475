"""Every interval README.md quotes for a committed run comes from that run's report.md
(so a rerun that moves a number fails here until README follows)."""
import re

import pytest

from conftest import ROOT

INTERVAL = re.compile(r"[+−-]?\d+\.\d+ \[[+−-]?\d+\.\d+, [+−-]?\d+\.\d+\]")


def _norm(text: str) -> str:
    return text.replace("−", "-")


@pytest.mark.parametrize("heading, report", [
    ("## What the default run shows", "report.md"),             # the default dvc repro
    ("## What to use instead of BN", "results/dp/report.md"),   # make dp
    ("## The memorization regime", "results/memreg/report.md"),  # make memreg
    ("## The zoo", "results/grid.md"),                           # make grid
])
def test_readme_numbers_come_from_the_report(heading, report):
    readme = (ROOT / "README.md").read_text()
    start = readme.index(heading)
    section = readme[start:readme.index("\n## ", start + 10)]
    quoted = INTERVAL.findall(section)
    assert len(quoted) >= 4, "the section quotes its intervals"
    text = _norm((ROOT / report).read_text())
    missing = [q for q in quoted if _norm(q) not in text]
    assert not missing, f"README quotes intervals {report} does not hold: {missing}"
