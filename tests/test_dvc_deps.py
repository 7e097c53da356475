"""Every dvc.yaml stage lists, as deps, exactly the bnmem modules its script imports
(directly or through other bnmem modules, at any depth, including imports inside
functions): a module missing from deps would let DVC reuse a stale output after that module
changed; one too many reruns the stage for nothing."""
import ast
from pathlib import Path

import yaml

from conftest import ROOT

SRC = ROOT / "src"


def _module_file(name: str) -> Path | None:
    path = SRC / Path(*name.split("."))
    for f in (path.with_suffix(".py"), path / "__init__.py"):
        if f.is_file():
            return f
    return None


def _imports(file: Path) -> set[str]:
    """bnmem modules imported anywhere in `file` (plus the packages on the way)."""
    out = set()
    for node in ast.walk(ast.parse(file.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n == "bnmem" or n.startswith("bnmem."):
                parts = n.split(".")
                out |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
    return {n for n in out if _module_file(n)}


def closure(script: Path) -> set[Path]:
    """Files of every bnmem module `script` needs, with the C sources the native package
    compiles (sources and headers) and any C file a module names (its own kernel), and
    stages/_boot.py when the script imports it."""
    todo, seen = list(_imports(script)), set()
    if "import _boot" in script.read_text():
        todo += list(_imports(ROOT / "stages" / "_boot.py"))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += list(_imports(_module_file(name)))
    files = {_module_file(n) for n in seen}
    for f in list(files):  # a module's own C kernel (bnmem/roc.py compiles roc_boot.c)
        files |= {c for c in f.parent.glob("*.c") if f.parent != SRC / "bnmem" / "native"
                  and c.name in f.read_text()}
    if "bnmem.native" in seen:
        files |= {p for p in (SRC / "bnmem" / "native").iterdir() if p.suffix in (".c", ".h")}
    return files


def test_every_stage_depends_on_the_modules_it_imports():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    missing = {}
    for name, stage in stages.items():
        deps = {ROOT / d for d in stage["deps"]}
        script = ROOT / next(d for d in stage["deps"] if d.startswith("stages/") and d != "stages/_boot.py")
        need = closure(script) | ({ROOT / "stages" / "_boot.py"} if "import _boot" in script.read_text() else set())
        lack = sorted(str(p.relative_to(ROOT)) for p in need - deps)
        # and no module it does not import: a needless dep reruns the stage for nothing
        extra = sorted(str(d.relative_to(ROOT)) for d in deps
                       if d.is_relative_to(SRC) and d not in need)
        if lack or extra:
            missing[name] = {"lack": lack, "extra": extra}
    assert not missing, f"dvc.yaml deps differ from the imported modules: {missing}"


def test_root_metrics_are_the_default_pipelines_only():
    """examples/audit is a DVC subrepo (its own .dvc), so the root's `dvc metrics show` /
    `diff` list the default pipeline's headline only (<= 60 values), not the audit's."""
    import json
    import shutil
    import subprocess
    assert (ROOT / "examples" / "audit" / ".dvc" / "config").is_file()
    import sys
    dvc = shutil.which("dvc", path=str(Path(sys.executable).parent)) or shutil.which("dvc")
    assert dvc, "dvc not found beside the interpreter or on PATH"
    out = subprocess.run([dvc, "metrics", "show", "--json"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    files = next(iter(json.loads(out).values()))["data"]
    assert sorted(files) == ["metrics/attack.json", "metrics/deltas.json", "metrics/train.json"]

    def count(d):
        return sum(count(v) for v in d.values()) if isinstance(d, dict) else 1
    n = sum(count(v["data"]) for v in files.values())
    assert 0 < n <= 60, n


def test_the_wheel_carries_every_c_source():
    """pyproject's package-data globs match every .c / .h under src/bnmem, so a
    non-editable install compiles the same kernels (roc_boot.c was missing once, and the
    ROC bootstrap silently fell back to the 32x slower numpy path)."""
    import fnmatch
    import tomllib
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["bnmem"]
    pkg = SRC / "bnmem"
    sources = [p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.suffix in (".c", ".h")]
    assert sources
    missing = [s for s in sources if not any(fnmatch.fnmatch(s, g) and s.count("/") == g.count("/")
                                             for g in globs)]
    assert not missing, f"package-data misses {missing}"


def test_no_stage_depends_on_where_shadows_run():
    """shadow.backend / resources / retries / tls choose where shadows run, never what they
    compute: only configure reads params.yaml as a whole (and writes recipes without them);
    no other stage lists them, the `shadow` group or the file; the stages over every arm
    read configure's data/recipes/all.yaml (every other key, defaults resolved)."""
    from bnmem.config import EXECUTION_KEYS
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        keys = set()
        for p in stage.get("params", []):
            keys |= set(p) if isinstance(p, dict) else {p}
        if name == "configure":
            assert keys == {"params.yaml"}
            continue
        assert not keys & {"shadow", "params.yaml"}, (name, keys)
        assert not {k for k in keys if k.split(".")[-1] in EXECUTION_KEYS}, (name, keys)
        if name in ("attack", "exposure", "report"):
            assert "--params data/recipes/all.yaml" in stage["cmd"] and not keys, name
            assert "data/recipes/all.yaml" in stage["deps"], name
