"""dvc.yaml's deps follow the imports, by folder, and the folders form layers.

A stage lists, as deps, the package folders (`src/bnmem/<package>`) of every bnmem module
its script imports (directly or through other bnmem modules, at any depth, including
imports inside functions), plus its own stage module and the files outside the packages:
a folder missing from deps would let DVC reuse a stale output after a module in it
changed; one too many reruns the stage for nothing. Each package imports only from the
packages below it (LAYERS), and `bnmem.core` / `bnmem.attack` never load torch."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

SRC = ROOT / "src"
PKG = SRC / "bnmem"
# package -> the packages its modules may import (itself included); stages and the
# drivers (bnmem.command, bnmem.audit_project) sit above everything
LAYERS = {
    "core": {"core"},
    "data": {"core", "data"},
    "models": {"core", "data", "models"},
    "native": {"core", "models", "native"},
    "grads": {"core", "data", "models", "native", "grads"},
    "train": {"core", "data", "models", "native", "grads", "train"},
    "attack": {"core", "attack"},
    "exposure": {"core", "data", "models", "native", "train", "attack", "exposure"},
    "theory": {"core", "theory"},
    "report": {"core", "data", "attack", "report"},  # reads records: runs no model
}
TORCH_FREE = ("core", "attack")


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
    """Files of every bnmem module `script` needs (and stages/_boot.py's when the script
    imports it)."""
    todo, seen = list(_imports(script)), set()
    if "import _boot" in script.read_text():
        todo += list(_imports(ROOT / "stages" / "_boot.py"))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += list(_imports(_module_file(name)))
    return {_module_file(n) for n in seen}


def unit(f: Path) -> Path:
    """What a stage lists for module file `f`: its package folder (C sources included), or
    the file itself for bnmem/__init__.py, the stage modules and the drivers."""
    rel = f.relative_to(PKG)
    return PKG / rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] != "stages" else f


def deps_of(script: Path) -> set[Path]:
    """The src deps a stage running `script` must list."""
    return {unit(f) for f in closure(script)}


def test_every_stage_depends_on_the_folders_it_imports():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    wrong = {}
    for name, stage in stages.items():
        deps = {ROOT / d for d in stage["deps"]}
        script = ROOT / next(d for d in stage["deps"] if d.startswith("stages/") and d != "stages/_boot.py")
        need = deps_of(script) | ({ROOT / "stages" / "_boot.py"} if "import _boot" in script.read_text() else set())
        lack = sorted(str(p.relative_to(ROOT)) for p in need - deps)
        # and no folder it does not import: a needless dep reruns the stage for nothing
        extra = sorted(str(d.relative_to(ROOT)) for d in deps if d.is_relative_to(SRC) and d not in need)
        if lack or extra:
            wrong[name] = {"lack": lack, "extra": extra}
    assert not wrong, f"dvc.yaml deps differ from the imported folders: {wrong}"


def test_packages_import_only_the_layers_below():
    """A package's modules import bnmem modules only from the packages LAYERS allows (the
    import graph between packages has no cycle and nothing imports upward)."""
    assert {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()} - {"stages"} == set(LAYERS)
    wrong = []
    for pkg, allowed in LAYERS.items():
        for f in (PKG / pkg).rglob("*.py"):
            used = {n.split(".")[1] for n in _imports(f) if n.count(".") >= 1}
            if used - allowed:
                wrong.append(f"{f.relative_to(SRC)} imports bnmem.{sorted(used - allowed)}")
    assert not wrong, wrong


@pytest.mark.parametrize("pkg", TORCH_FREE)
def test_numpy_only_packages_never_load_torch(pkg):
    """Importing every module of bnmem.core / bnmem.attack loads neither torch nor
    torchvision (checked in a fresh interpreter), so the attack stage's maths reruns only
    when its own code changes and starts without torch's import time."""
    mods = sorted(f"bnmem.{pkg}." + f.stem for f in (PKG / pkg).glob("*.py") if f.stem != "__init__")
    code = ("import sys, importlib\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'torchvision')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


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
    from bnmem.core.config import EXECUTION_KEYS
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


@pytest.mark.parametrize("stage", ["configure", "attack", "report"])
def test_stages_that_run_no_model_never_load_torch(stage):
    """The configure, attack and report stages run no model: starting them loads neither
    torch nor torchvision (a fresh interpreter), which saves torch's import time per start."""
    code = (f"import sys, bnmem.stages.{stage}\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'torchvision')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_stage_runs_the_code_of_its_own_checkout(tmp_path):
    """DVC hashes the checkout's src/ as a stage's deps, so the stage must run that code:
    `dvc exp run --queue` / `--temp` run a copy of the commit under .dvc/tmp/exps, where
    the venv's editable install would otherwise import the main checkout's bnmem."""
    import os
    import shutil
    for name in ("stages", "src"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (tmp_path / "stages" / "probe.py").write_text("import _boot  # noqa: F401\nimport bnmem\n"
                                                  "print(bnmem.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(tmp_path / "stages" / "probe.py")], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == tmp_path / "src" / "bnmem" / "__init__.py", out.stdout
