"""shadow.backend: dask on a real cluster: a scheduler and two worker processes started with
the `dask` command on 127.0.0.1 (no dashboard, every socket on loopback), the default shadow
stage run through it, a worker SIGKILLed mid-run, the scheduler lost mid-run, TLS."""
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from bnmem.core.config import ConfigError, config_from_dict, load_config
from bnmem.core.recipes import arm_recipe, pipeline_recipe
from bnmem.train.cluster import LoopbackCluster as Cluster
from conftest import ROOT, run_stage

distributed = pytest.importorskip("distributed", reason="pip install -e '.[dask]'")
ARM = "batchnorm"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The default pool, the default batchnorm recipe and two shorter ones, and their shards
    from the local backend (the references every Dask run must equal bit for bit)."""
    d = tmp_path_factory.mktemp("dask")
    assert run_stage("prepare.py", "--params", "params.yaml", "--pool", str(d / "pool.npz"),
                     "--test", str(d / "test.npz")).returncode == 0
    assert run_stage("configure.py", "--params", "params.yaml", "--out",
                     str(d / "recipes")).returncode == 0
    recipe = yaml.safe_load((d / "recipes" / f"{ARM}.yaml").read_text())
    recipe["shadow"]["chunk"] = 4  # the default recipe in 4 tasks: the lost-worker test needs
    (d / "default_chunk4.yaml").write_text(yaml.safe_dump(recipe))  # its chunks to run long
    recipe = yaml.safe_load((d / "recipes" / f"{ARM}.yaml").read_text())
    # the two-worker run: every part of the default recipe (several checkpoints tracked,
    # several annealed endpoints), shorter: 7 epochs a model, not 19 (the default recipe's
    # shard took 25 CPU seconds, once for the reference and again for the Dask run)
    recipe["train"].update(epochs=4, checkpoints=[1, 2])
    recipe["shadow"]["budgets"] = [1, 2]
    (d / "medium.yaml").write_text(yaml.safe_dump(recipe))
    # the failure tests: the same stage on a shorter recipe (5 epochs a model, not 19)
    recipe["train"].update(epochs=4, checkpoints=[1])
    recipe["shadow"]["budgets"] = [1]
    (d / "small.yaml").write_text(yaml.safe_dump(recipe))
    recipe["shadow"]["chunk"] = 4  # 4 tasks: a worker is lost mid-run with work left
    (d / "chunk4.yaml").write_text(yaml.safe_dump(recipe))
    for name, out in (("medium.yaml", "local_medium.npz"), ("small.yaml", "local_small.npz")):
        res = shadow(d, d / name, d / out, backend="local")
        assert res.returncode == 0, res.stderr[-3000:]
    return d


def params_file(d: Path, backend: str, **shadow_keys) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["shadow"].update(backend=backend, **shadow_keys)
    path = d / f"params-{backend}-{len(list(d.glob('params-*')))}.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def shadow_cmd(d: Path, recipe: Path, out: Path, backend: str, **keys) -> list[str]:
    return [sys.executable, str(ROOT / "stages/shadow.py"), "--recipe", str(recipe), "--pool",
            str(d / "pool.npz"), "--shard", "0", "--out", str(out),
            "--params", str(params_file(d, backend, **keys))]


def env_for(address: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    if address:
        env["DASK_SCHEDULER_ADDRESS"] = address
    env["DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT"] = "10s"
    return env


def shadow(d, recipe, out, backend="dask", address=None, **keys):
    return subprocess.run(shadow_cmd(d, recipe, out, backend, **keys), env=env_for(address),
                          capture_output=True, text=True)


@contextmanager
def stage_on(cluster, d: Path, out: Path, log: Path, recipe: str = "chunk4.yaml"):
    """The dask shadow stage running on `cluster` (stderr to `log`) while the body acts on
    the cluster; then wait for the stage (at most 300 s) and stop the cluster."""
    with open(log, "w") as err:
        proc = subprocess.Popen(shadow_cmd(d, d / recipe, out, "dask"),
                                env=env_for(cluster.address), stderr=err)
        try:
            yield proc
            proc.wait(timeout=300)
        finally:
            proc.kill()
            cluster.stop()


def same_shard(d: Path, out: Path, reference: str = "local_small.npz") -> bool:
    """Whether `out` is the local backend's shard bit for bit (a model's bits depend on its
    id only, not on its chunk: chunk4.yaml and small.yaml share their reference)."""
    return (d / reference).read_bytes() == out.read_bytes()


def workers_used(stderr: str) -> set[str]:
    return {line.split(" on dask worker ")[1].split()[0] for line in stderr.splitlines()
            if " on dask worker " in line}


@pytest.mark.slow
def test_shard_on_two_workers_is_bit_identical_to_local(work):
    cluster = Cluster(work)
    try:
        res = shadow(work, work / "medium.yaml", work / "dask.npz", address=cluster.address)
        assert res.returncode == 0, res.stderr[-3000:] + cluster.tail()
        assert cluster.sockets() == {"127.0.0.1"}  # loopback only
    finally:
        cluster.stop()
    assert same_shard(work, work / "dask.npz", "local_medium.npz")
    used = workers_used(res.stderr)
    assert len(used) == 2 and all(a.startswith("tcp://127.0.0.1:") for a in used), res.stderr
    assert "16 models, 0 resumed" in res.stderr


@pytest.mark.slow
def test_worker_sigkilled_mid_run_still_gives_the_identical_shard(work):
    cluster = Cluster(work)
    out, log = work / "killed.npz", work / "killed.log"
    survivor, victim = cluster.addresses()
    with stage_on(cluster, work, out, log) as proc:
        with cluster.client() as c:  # kill the victim while it runs its first chunk
            deadline, key = time.time() + 120, None
            while key is None and time.time() < deadline and proc.poll() is None:
                mine = [k for k in c.processing().get(victim, ()) if "bnmem-shadow" in k]
                key = mine[0] if mine else None
                time.sleep(0.05)
        assert key is not None, log.read_text()[-2000:]
        os.killpg(cluster.process(victim).pid, signal.SIGKILL)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert same_shard(work, out)
    first, last = (int(v) for v in key.split("-")[3:5])  # bnmem-shadow-<arm>-<first>-<last>-
    chunks = [line for line in text.splitlines() if " on dask worker " in line]
    by_survivor = [line for line in chunks if f"on dask worker {survivor} " in line]
    assert len(chunks) == len(by_survivor) == 4, text[-3000:]  # the victim finished none
    assert any(f"models {list(range(first, last + 1))} " in line for line in by_survivor)


@pytest.mark.slow
def test_pool_lost_mid_run_is_scattered_again_and_gives_the_identical_shard(work):
    """Scattered data has no recipe to recompute it from, and Dask's active memory manager
    keeps only as many replicas of the pool as tasks still wait for, so a dying worker can
    take its last copy and the scheduler cancels the chunks that need it (how the SIGKILL
    test above once failed in about eight suite runs). Here the pool is lost for certain,
    mid-run, with both workers up: another client force-cancels its keys, and the scheduler
    forgets them and cancels every chunk that needs them, as it does when the last copy
    dies. The stage scatters the pool again, resubmits the chunks not saved, and gives the
    local backend's shard bit for bit; the pool's keys are this run's own."""
    out, parts, log = work / "rescatter.npz", work / "rescatter.partial", work / "rescatter.log"
    cluster = Cluster(work)
    with stage_on(cluster, work, out, log) as proc:
        cluster.wait(lambda: len(list(parts.glob("model_*.npz"))) >= 4, "first chunk back",
                     timeout=180)
        with cluster.client() as c:
            keys = c.run_on_scheduler(lambda dask_scheduler: sorted(
                str(k) for k in dask_scheduler.tasks if str(k).startswith("bnmem-")))
            pool = [k for k in keys if k.startswith("bnmem-pool-")]
            runs = {k.split("-")[-2] for k in keys}  # bnmem-...-<run>-<round>
            assert len(pool) == 3 and len(runs) == 1, keys
            c.cancel([distributed.Future(k, c) for k in pool], force=True)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "scattering it again and resubmitting" in text, text[-3000:]
    assert same_shard(work, out)


@pytest.mark.slow
def test_scheduler_lost_mid_run_loses_no_finished_chunk(work):
    out, parts = work / "lost.npz", work / "lost.partial"
    cluster = Cluster(work)
    proc = subprocess.Popen(shadow_cmd(work, work / "chunk4.yaml", out, "dask"),
                            env=env_for(cluster.address), stderr=subprocess.PIPE, text=True)
    try:
        cluster.wait(lambda: len(list(parts.glob("model_*.npz"))) >= 4, "first chunk back",
                     timeout=180)
        os.killpg(cluster.scheduler.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        cluster.stop()
    errors = [line for line in err.splitlines() if line.startswith("bnmem ")]
    assert proc.returncode == 3 and len(errors) == 1, err[-3000:]
    assert "went away" in errors[0] and "rerun to resume" in errors[0], errors
    assert "Traceback" not in err, err[-3000:]
    saved = len(list(parts.glob("model_*.npz")))
    assert 4 <= saved < 16 and not out.exists()
    cluster = Cluster(work)  # a new cluster: the rerun trains only what was not saved
    try:
        res = shadow(work, work / "chunk4.yaml", out, address=cluster.address)
    finally:
        cluster.stop()
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"16 models, {saved} resumed" in res.stderr
    assert same_shard(work, out)


def test_comm_closed_at_info_keeps_its_line_not_its_traceback():
    """The client logs a closed comm at INFO with its traceback when the scheduler dies
    (distributed.batched); connect() drops such tracebacks, keeps the line and leaves
    WARNING and above as they are."""
    import io
    import logging

    from distributed.comm.core import CommClosedError

    from bnmem.train.scaleout import quiet_comm_tracebacks
    quiet_comm_tracebacks()
    quiet_comm_tracebacks()  # idempotent
    out, logger = io.StringIO(), logging.getLogger("distributed.batched")
    handler, level = logging.StreamHandler(out), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        try:
            raise CommClosedError("in test")
        except CommClosedError:
            logger.info("Batched Comm Closed %r", "comm", exc_info=True)
            text = out.getvalue()
            logger.warning("a real failure", exc_info=True)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert "Batched Comm Closed 'comm'" in text and "Traceback" not in text
    assert "Traceback" in out.getvalue()[len(text):]
    assert sum(1 for f in logger.filters if type(f).__name__ == "_NoInfoTraceback") == 1


def make_cert(d: Path, name: str) -> dict:
    key, cert = d / f"{name}-key.pem", d / f"{name}-cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}"],
                   check=True, capture_output=True)
    return {"ca_file": str(cert), "cert": str(cert), "key": str(key)}


@pytest.mark.slow
def test_tls_cluster_admits_only_holders_of_its_certificate(work):
    ours, theirs = make_cert(work, "bnmem"), make_cert(work, "intruder")
    cluster = Cluster(work, workers=1, tls=ours)
    try:
        for security in ("None", f"Security(tls_ca_file={ours['ca_file']!r})"):
            probe = subprocess.run(  # a client of its own, without a client certificate
                [sys.executable, "-c", "from distributed import Client, Security\n"
                 f"Client({cluster.address!r}, timeout=5, security={security}).close()\n"
                 "print('connected')"], capture_output=True, text=True, timeout=120)
            assert probe.returncode != 0 and "connected" not in probe.stdout, probe.stderr[-500:]
        res = shadow(work, work / "small.yaml", work / "intruder.npz",
                     address=cluster.address, tls=dict(theirs, ca_file=ours["ca_file"]))
        errors = [line for line in res.stderr.splitlines() if line.startswith("bnmem ")]
        assert res.returncode == 3 and len(errors) == 1 and "cannot connect" in errors[0], \
            res.stderr[-2000:]
        assert "SSL" in errors[0], errors  # refused in the handshake (unknown CA)
        res = shadow(work, work / "small.yaml", work / "tls.npz",
                     address=cluster.address)  # no certificate at all: one line, before connecting
        assert res.returncode == 3 and "has no certificate" in res.stderr, res.stderr[-2000:]
        res = shadow(work, work / "small.yaml", work / "tls.npz",
                     address=cluster.address, tls=ours)
        assert res.returncode == 0, res.stderr[-3000:] + cluster.tail()
    finally:
        cluster.stop()
    assert same_shard(work, work / "tls.npz")
    assert all(a.startswith("tls://127.0.0.1:") for a in workers_used(res.stderr))


@pytest.mark.slow
def test_worker_without_the_cpu_pin_is_refused(work):
    """A worker whose numpy loaded before bnmem could pin it (started without the variables
    `python -m bnmem.train.scaleout env` prints) may compute other bits: the stage refuses it."""
    from bnmem.core import cpu
    if cpu.level() != "avx2":
        pytest.skip("no CPU pin on this machine (bnmem.core.cpu.level() is native)")
    saved = {k: os.environ.pop(k) for k in cpu.PIN if k in os.environ}
    try:
        cluster = Cluster(work, workers=1)
    finally:
        os.environ.update(saved)
    try:
        res = shadow(work, work / "recipes" / f"{ARM}.yaml", work / "unpinned.npz",
                     address=cluster.address)
    finally:
        cluster.stop()
    errors = [line for line in res.stderr.splitlines() if line.startswith("bnmem ")]
    assert res.returncode == 3 and len(errors) == 1, res.stderr[-2000:]
    assert "pinned before numpy" in errors[0] and "bnmem.train.scaleout env" in errors[0], errors
    assert not (work / "unpinned.npz").exists()


@pytest.mark.slow
def test_no_scheduler_named_is_one_line(work):
    res = shadow(work, work / "recipes" / f"{ARM}.yaml", work / "none.npz", address=None)
    assert res.returncode == 3
    assert res.stderr.strip().splitlines()[-1].startswith(
        "bnmem shadow: error: shadow.backend: dask needs a running scheduler: set "
        "DASK_SCHEDULER_ADDRESS"), res.stderr[-1000:]


def test_env_command_prints_the_pin():
    out = subprocess.run([sys.executable, "-m", "bnmem.train.scaleout", "env"], capture_output=True,
                         text=True, check=True).stdout
    from bnmem.core import cpu
    assert out.splitlines() == [f"export {k}='{v}'" for k, v in cpu.environment().items()]


@pytest.mark.parametrize("keys", [{"backend": "dask"}, {"resources": {"GPU": 0.25}},
                                  {"retries": 0}, {"tls": {"ca_file": "a", "cert": "b",
                                                           "key": "c"}}])
def test_execution_keys_leave_every_recipe_unchanged(keys):
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    changed = json.loads(json.dumps(base))
    changed["shadow"].update(keys)
    for arm in base["arms"]:
        assert arm_recipe(config_from_dict(changed), arm) == \
            arm_recipe(config_from_dict(base), arm)
    assert pipeline_recipe(config_from_dict(changed)) == pipeline_recipe(config_from_dict(base))


def test_all_recipe_is_the_config_without_where_shadows_run(tmp_path):
    cfg = load_config(ROOT / "params.yaml")
    (tmp_path / "all.yaml").write_text(yaml.safe_dump(pipeline_recipe(cfg)))
    back = load_config(tmp_path / "all.yaml")
    assert back == cfg  # the execution keys at their defaults, as in params.yaml
    assert not set(yaml.safe_load((tmp_path / "all.yaml").read_text())["shadow"]) & {
        "backend", "resources", "retries", "tls"}


@pytest.mark.parametrize("keys, message", [
    ({"backend": "ray"}, "shadow.backend: 'ray' is invalid; valid: local | dask"),
    ({"resources": {"GPU": 0}}, "shadow.resources.GPU: 0.0 is invalid"),
    ({"resources": {"GPU": "a"}}, "shadow.resources.GPU: expected a number"),
    ({"retries": -1}, "shadow.retries: -1 is invalid"),
    ({"tls": {"ca_file": "a"}}, "shadow.tls: "),
])
def test_bad_execution_keys_name_the_key(keys, message):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["shadow"].update(keys)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("|", r"\|")):
        config_from_dict(raw)


def test_default_params_run_locally():
    assert load_config(ROOT / "params.yaml").shadow.backend == "local"


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])  # Ctrl-C, and README's `kill %1`
def test_cluster_command_prints_its_address_and_stops_its_processes(stop, tmp_path):
    import signal

    import psutil
    proc = subprocess.Popen([sys.executable, "-m", "bnmem.train.scaleout", "cluster", "--workers", "2"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})  # its logs stay here
    try:
        line = proc.stdout.readline()
        assert line.startswith("export DASK_SCHEDULER_ADDRESS=tcp://127.0.0.1:"), line
        assert f"logs in {tmp_path}" in line, line
        address = line.split("=", 1)[1].split()[0]
        with distributed.Client(address, timeout=10) as c:
            assert len(c.scheduler_info()["workers"]) == 2
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) == 3
        proc.send_signal(getattr(signal, stop))
        assert proc.wait(timeout=30) == 0
        assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        proc.kill()


@pytest.mark.slow
def test_last_eligible_worker_lost_mid_run_is_one_line_not_a_hang(work):
    """Dask waits forever for a worker that can run the rest (here: the only worker with the
    GPU the tasks ask for dies; the other still holds the pool); the stage does not: it
    looks at the workers while no chunk comes back and stops with one line."""
    cluster = Cluster(work, workers=2, worker_args=[[], ["--resources", "GPU=1"]])
    out, log = work / "orphan.npz", work / "orphan.log"
    _, victim = cluster.addresses()
    from bnmem.train import scaleout
    with open(log, "w") as err:
        proc = subprocess.Popen(shadow_cmd(work, work / "default_chunk4.yaml", out, "dask",
                                           resources={"GPU": 1}),
                                env=env_for(cluster.address), stderr=err)
        try:
            with cluster.client() as c:
                # the stage's look when the scheduler cancels chunks (scaleout._unmet), on
                # this live cluster: the workers asked of the scheduler now (not the client's
                # cached copy); no line while a worker can run them or nothing is asked
                assert set(scaleout._workers(c)) == set(cluster.addresses())
                assert scaleout._unmet(c, {"GPU": 1}, 1, 4, work) is None
                assert scaleout._unmet(c, {}, 1, 4, work) is None
                deadline = time.time() + 120
                while time.time() < deadline and not c.processing().get(victim):
                    time.sleep(0.05)
                os.killpg(cluster.process(victim).pid, signal.SIGKILL)
                deadline = time.time() + 60
                while time.time() < deadline and victim in scaleout._workers(c):
                    time.sleep(0.1)
                # with the GPU worker gone, the resource line (what to do), whatever the race
                line = scaleout._unmet(c, {"GPU": 1}, 1, 4, work)
                assert line and line.startswith("shadow.resources: no worker has {'GPU': 1}"), line
                assert f"1 of 4 chunks saved in {work}; rerun to resume" in line
            proc.wait(timeout=120)  # WATCH (10 s) after the loss, not forever
        finally:
            proc.kill()
            cluster.stop()
    errors = [line for line in log.read_text().splitlines() if line.startswith("bnmem ")]
    assert proc.returncode == 3 and len(errors) == 1, log.read_text()[-2000:]
    # which comes first is a race: the stage's look at the workers (no one left with the
    # GPU), or the scheduler cancelling the chunks because the dead worker held data they
    # needed (a clean-clone CI run at 0e5a8c7 got the second); either way the line is the
    # resource one (the stage asks the scheduler why on a cancellation), no hang
    assert "shadow.resources: no worker has {'GPU': 1.0}" in errors[0], errors
    assert "rerun to resume" in errors[0] and not out.exists()


def test_tls_files_with_a_tcp_address_is_one_line(work):
    tls = make_cert(work, "plain")
    res = shadow(work, work / "recipes" / f"{ARM}.yaml", work / "plain.npz",
                 address="tcp://127.0.0.1:9", tls=tls)
    errors = [line for line in res.stderr.splitlines() if line.startswith("bnmem ")]
    assert res.returncode == 3 and len(errors) == 1, res.stderr[-2000:]
    assert "asks for TLS, but the address is not tls://" in errors[0]

