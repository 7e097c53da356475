"""shadow.backend: dask — shadow chunks as tasks on an existing Dask cluster.

The shadow stage connects to the scheduler that Dask's own config names
(DASK_SCHEDULER_ADDRESS, or `scheduler-address` in a Dask config file), scatters the pool
to every worker once, and submits each chunk of `shadow.chunk` models as one task that
asks for `shadow.resources` (e.g. {GPU: 0.25} on workers started with --resources GPU=1).
Each chunk that comes back goes through the stage's resume path at once (one part file
per model), so a lost worker costs only its running chunk (Dask runs it elsewhere; if the
pool's last copy went with it, the stage scatters the pool again and resubmits what is not
saved), a task that raised is retried `shadow.retries` times, and a killed stage or a
scheduler that went away loses no finished chunk: the rerun resumes.

Results are bit-identical to the local backend on the same CPU kind: a model's bits
depend on its id only (bnmem.train.shadow.train_chunk), every task runs torch single-threaded,
and each task reports its worker's kernel signature (CPU pin, library versions), which
must equal the stage's own. TLS (`shadow.tls`, or Dask's distributed.comm.tls config)
makes the scheduler admit only holders of a certificate its CA signed.

distributed is an optional dependency (`pip install 'bnmem[dask]'`); nothing here imports
it, or torch, until the dask backend runs.
"""
from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Callable

import numpy as np

from bnmem.core.io import ClusterError
from bnmem.train.signature import check_signature, cpu_model, signature

log = logging.getLogger(__name__)


def train_chunk_task(cfg, arm: str, data: dict, ids: list[int]) -> dict:
    """One task: train shadow models `ids` on a worker, torch single-threaded: a worker's
    threads each run one task, so the worker's --nthreads is its parallelism (the count is
    left at 1: restoring it would race with the worker's other tasks). Returns the models'
    arrays, this worker's signature, address, CPU model and device, and the seconds taken."""
    import torch

    from bnmem.train.shadow import train_chunk
    from bnmem.models.runtime import resolve_device

    t0 = time.perf_counter()
    torch.set_num_threads(cfg.train.threads or 1)  # the stage's count (0, torch's default
    # of the client's cores, has no fixed meaning across machines: one thread then)
    models = train_chunk(cfg, arm, torch.from_numpy(data["x"]), torch.from_numpy(data["y"]),
                         data["keep"], ids, workers=1)
    try:
        from distributed import get_worker
        where = get_worker().address
    except (ImportError, ValueError):
        where = "this process"
    return {"models": models, "signature": signature(), "worker": where, "cpu": cpu_model(),
            "device": resolve_device(cfg.train.device).type, "seconds": time.perf_counter() - t0}


def security(tls) -> object:
    """distributed.Security from shadow.tls (all three files), else from Dask's own config
    (distributed.comm.tls.*: ca-file, client.cert, client.key)."""
    from distributed import Security

    if tls.ca_file is None:
        return Security()
    for key in ("ca_file", "cert", "key"):
        if not Path(getattr(tls, key)).is_file():
            raise ClusterError(f"shadow.tls.{key}: {getattr(tls, key)} not found (a PEM file "
                               "of the certificate set the scheduler was started with)")
    return Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert,
                    tls_client_key=tls.key, require_encryption=True)


def scheduler_address() -> str:
    """The scheduler Dask's config names (DASK_SCHEDULER_ADDRESS); none: ClusterError."""
    import dask

    address = dask.config.get("scheduler-address", None)
    if not address:
        raise ClusterError("shadow.backend: dask needs a running scheduler: set "
                           "DASK_SCHEDULER_ADDRESS (e.g. tcp://127.0.0.1:8786); none is set")
    return str(address)


class _NoInfoTraceback(logging.Filter):
    """Keeps a distributed log line below WARNING but drops its traceback: a client whose
    scheduler goes away logs the comm's closure at INFO with the CommClosedError's traceback
    (distributed.batched: "Batched Comm Closed"), before run_chunks sees the loss and says
    it in one error line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and record.exc_info:
            record.exc_info, record.exc_text = None, None
        return True


# the client-side loggers that log an expected closure with its traceback
QUIET_LOGGERS = ("distributed.batched", "distributed.client", "distributed.core",
                 "distributed.comm.tcp", "distributed.comm.core")


def quiet_comm_tracebacks() -> None:
    """Drop the tracebacks of the client's INFO-level comm messages (_NoInfoTraceback);
    idempotent."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoInfoTraceback) for f in logger.filters):
            logger.addFilter(_NoInfoTraceback())


def connect(execution):
    """A distributed.Client on the configured scheduler (one-line ClusterError if none)."""
    try:
        import distributed
    except ImportError:
        raise ClusterError("shadow.backend: dask needs the optional dependency distributed: "
                           "pip install 'bnmem[dask]'") from None
    address = scheduler_address()
    sec = security(execution.tls)
    if sec.require_encryption and not address.startswith("tls://"):
        raise ClusterError(f"DASK_SCHEDULER_ADDRESS={address}: shadow.tls (or Dask's "
                           "distributed.comm.require-encryption) asks for TLS, but the address "
                           "is not tls://; use the scheduler's tls:// address")
    if address.startswith("tls://") and not (sec.tls_ca_file and sec.tls_client_cert):
        raise ClusterError(f"DASK_SCHEDULER_ADDRESS={address}: the scheduler speaks TLS and "
                           "this client has no certificate: set shadow.tls (ca_file, cert, "
                           "key) or Dask's distributed.comm.tls config (ca-file, client.cert, "
                           "client.key)")
    quiet_comm_tracebacks()
    try:
        client = distributed.Client(address, security=sec, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ClusterError(f"DASK_SCHEDULER_ADDRESS={address}: cannot connect "
                           f"({reason[:200]})") from None
    return client


def run_chunks(cfg, arm: str, x, y, keep: np.ndarray, chunks: list[list[int]], execution,
               finished: Callable[[list[int], list[dict], float, str], None],
               parts: Path) -> None:
    """Train `chunks` (lists of model ids) as tasks on the Dask cluster; `finished(chunk,
    models, seconds, where)` saves each chunk as it comes back.

    The pool is scattered under keys of this run only (`bnmem-pool-<name>-<run>-<round>`):
    two stages on one cluster never read each other's pool. Scattered data has no recipe
    the scheduler could recompute it from, and Dask keeps only as many replicas as tasks
    still wait for (its active memory manager drops the rest), so a worker that dies can
    take the pool's last copy with it and the scheduler cancels the chunks that need it
    (dask/distributed#3149). While the scheduler is still up and some worker can run them,
    the stage then scatters the pool again and resubmits the chunks not yet saved, at most
    RESCATTERS times; past that, or with the scheduler gone, it stops with one line."""
    import distributed

    client = connect(execution)
    address = client.scheduler.address
    mine = signature()
    futures: list = []
    failed = False
    run = uuid.uuid4().hex[:12]  # this stage's keys: never another stage's pool or result
    want = dict(execution.resources)
    arrays = {"x": x.numpy(), "y": y.numpy(), "keep": np.asarray(keep)}
    where: dict = {}

    def submit(left: list[list[int]], round_: int) -> set:
        names = {name: f"bnmem-pool-{name}-{run}-{round_}" for name in arrays}
        scattered = client.scatter({names[k]: v for k, v in arrays.items()},
                                   broadcast=True, hash=False)
        data = {k: scattered[names[k]] for k in arrays}
        out = set()
        for chunk in left:
            f = client.submit(train_chunk_task, cfg, arm, data, chunk, pure=False,
                              resources=want or None, retries=execution.retries,
                              key=f"bnmem-shadow-{arm}-{chunk[0]}-{chunk[-1]}-{run}-{round_}")
            where[f.key] = chunk
            futures.append(f)
            out.add(f)
        return out

    try:
        workers = _workers(client)
        if not workers:
            raise ClusterError(f"DASK_SCHEDULER_ADDRESS={address}: the scheduler has no "
                               "workers; start some (`dask worker <address>`)")
        log.info("dask %s: %d workers, %d chunks of %s", address, len(workers), len(chunks),
                 arm)
        if not eligible(workers, want):
            raise ClusterError(no_worker_line(want, workers))
        for worker, theirs in client.run(signature).items():  # early; each task checks too
            check_signature(mine, theirs, worker)
        pending = submit(chunks, 0)
    except (OSError, TimeoutError, CancelledError) as exc:
        failed = True
        _close(client, futures, failed)
        raise ClusterError(f"dask scheduler {address}: {_reason(exc)}; nothing was trained; "
                           "rerun when the cluster is back") from None
    except BaseException:
        failed = True
        _close(client, futures, failed)
        raise
    saved, devices, rounds = 0, set(), 0
    left = {tuple(c): c for c in chunks}  # not yet saved

    def cancelled(exc: BaseException | None, chunk: list[int] | None) -> set:
        """The chunks were cancelled: stop with a line, or scatter again and resubmit."""
        nonlocal rounds
        line = _unmet(client, want, saved, len(chunks), parts)
        if line:
            raise ClusterError(line)
        if client.status != "running":
            what = (_what_went(client, address) if exc is not None else
                    f"dask scheduler {address} went away (models {chunk} cancelled)")
        elif rounds >= RESCATTERS:
            what = (f"dask cluster {address} cancelled the chunks again after {rounds} "
                    "re-scatters of the pool")
        else:
            what = ""
        if what:
            raise ClusterError(f"{what}: {saved} of {len(chunks)} chunks finished and saved "
                               f"in {parts}; rerun to resume")
        rounds += 1
        log.warning("dask %s cancelled the chunks of %s (the pool's last copy went with a "
                    "worker, or the scheduler dropped it): scattering it again and "
                    "resubmitting the %d chunks not saved (%d of %d)", address, arm,
                    len(left), rounds, RESCATTERS)
        for f in futures:
            try:
                f.release()
            except Exception:  # noqa: BLE001, S110 (gone with the cancellation)
                pass
        futures.clear()
        try:
            return submit(list(left.values()), rounds)
        except (OSError, TimeoutError, CancelledError) as err:
            raise ClusterError(_lost(f"dask scheduler {address} went away", err, saved,
                                     len(chunks), parts)) from None

    try:
        while left:
            try:  # the scheduler's side: wait, at most WATCH s, then look at the workers
                with client.as_current():
                    done, pending = distributed.wait(list(pending), timeout=WATCH,
                                                     return_when="FIRST_COMPLETED")
            except (TimeoutError, distributed.TimeoutError):
                done = set()
            except CancelledError as exc:
                pending = cancelled(exc, None)
                continue
            except OSError as exc:
                raise ClusterError(_unmet(client, want, saved, len(chunks), parts) or _lost(
                    _what_went(client, address), exc, saved, len(chunks), parts)) from None
            if not done:
                try:
                    workers = _workers(client)
                except (OSError, TimeoutError, CancelledError) as exc:
                    raise ClusterError(_lost(f"dask scheduler {address} went away", exc,
                                             saved, len(chunks), parts)) from None
                if not eligible(workers, want):  # nothing could ever run the rest: no hang
                    raise ClusterError(no_worker_line(want, workers) + f" ({saved} of "
                                       f"{len(chunks)} chunks saved in {parts}; rerun to "
                                       "resume)")
                continue
            lost = None
            for future in done:
                chunk = where[future.key]
                if future.cancelled():
                    lost = chunk
                    continue
                if future.status == "error":
                    raise ClusterError(
                        f"dask task for models {chunk} failed after shadow.retries="
                        f"{execution.retries} retries ({_reason(future.exception())}); "
                        f"{saved} of {len(chunks)} chunks saved in {parts}; rerun to resume")
                try:
                    result = future.result()
                except CancelledError:
                    lost = chunk
                    continue
                except (OSError, TimeoutError) as exc:
                    raise ClusterError(_lost(f"dask scheduler {address} went away", exc,
                                             saved, len(chunks), parts)) from None
                check_signature(mine, result["signature"], result["worker"])
                devices.add(result["device"])
                if len(devices) > 1:  # train.device auto on workers with and without a GPU
                    raise ClusterError(
                        f"dask workers trained on {sorted(devices)}: one shard would mix CPU "
                        "and GPU bits; set train.device (cpu | cuda) or give every worker the "
                        f"same devices ({saved} of {len(chunks)} chunks saved in {parts})")
                # local disk: its errors are this machine's, not the cluster's (not caught)
                finished(chunk, result["models"], result["seconds"],
                         f" on dask worker {result['worker']} ({result['cpu']}, "
                         f"{result['device']})")
                saved += 1
                left.pop(tuple(chunk), None)
                future.release()
            if lost is not None and left:
                pending = cancelled(None, lost)
    except BaseException:
        failed = True
        raise
    finally:
        _close(client, futures, failed)


RESCATTERS = 2  # times the pool is scattered again after the cluster cancelled the chunks
WATCH = 10.0  # seconds between looks at the workers while no chunk comes back


def eligible(workers: dict, want: dict) -> bool:
    """Whether some worker can run a chunk that asks for the resources `want`."""
    return any(all(w.get("resources", {}).get(k, 0) >= v for k, v in want.items())
               for w in workers.values())


def no_worker_line(want: dict, workers: dict) -> str:
    if not workers:
        return ("the dask scheduler has no workers left; start some (`dask worker "
                "<address>`)")
    have = {a: w.get("resources", {}) for a, w in workers.items()}
    return (f"shadow.resources: no worker has {want} (workers have {have}); start workers "
            "with e.g. `dask worker ... --resources GPU=1`")


def _workers(client) -> dict:
    """The scheduler's workers, asked now: raises when it cannot be asked (the client's
    scheduler_info() swallows a failed refresh and returns its cached copy, which may list
    none, or the dead)."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def _unmet(client, want: dict, saved: int, n: int, parts: Path) -> str | None:
    """When the scheduler cancels the chunks but is still there, the cause may be that no
    worker left can run them (the only worker with the resources died holding data they
    needed): that line says what to do. None where the scheduler cannot be asked or some
    worker can run them (the caller's line stands)."""
    if not want or client.status != "running":
        return None
    try:
        workers = _workers(client)
    except Exception:  # noqa: BLE001 (gone as well: the caller's line)
        return None
    if eligible(workers, want):
        return None
    return (no_worker_line(want, workers) + f" (the scheduler cancelled the chunks; {saved} "
            f"of {n} chunks saved in {parts}; rerun to resume)")


def _what_went(client, address: str) -> str:
    """Why futures were cancelled: the scheduler went away, or it lost what they needed
    (the pool's only copies with their workers). The client's view of the workers is a
    cached copy, so only its own status tells the first case."""
    if client.status != "running":
        return f"dask scheduler {address} went away (chunks cancelled)"
    return (f"dask cluster {address} cancelled the chunks (the scheduler went away, or lost "
            "the pool with its workers)")


def _lost(what: str, exc: BaseException, saved: int, n: int, parts: Path) -> str:
    """The one line for a cluster lost after the chunks went out: the connection closed
    (CommClosedError is an OSError), timed out or the futures were cancelled. From the
    client's side these are one event, the scheduler went away; what was saved stays."""
    return (f"{what} ({_reason(exc)}); {saved} of {n} chunks finished and saved in "
            f"{parts}; rerun to resume")


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _close(client, futures: list, failed: bool) -> None:
    """Cancel what is left and close the client, quietly: after a failure the error line
    says it all, not the client's reconnect tracebacks."""
    if failed:
        for name in ["distributed", *logging.root.manager.loggerDict]:
            if name.startswith("distributed"):
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        for f in futures:
            try:
                f.cancel()
            except Exception:  # noqa: BLE001, S110 (the client is closed already)
                pass
    try:
        client.close(timeout=5)
    except Exception:  # noqa: BLE001, S110 (the scheduler is gone already)
        pass


def main(argv: list[str] | None = None) -> None:
    """Helpers for the dask backend.

    env:     the shell exports a Dask worker needs before it starts, so its numpy and torch
             run the kernels the stage pins (bnmem.core.cpu):
             eval "$(python -m bnmem.train.scaleout env)"; dask worker ...
    cluster: a scheduler and N one-thread workers on 127.0.0.1 (LoopbackCluster) until
             Ctrl-C or `kill`; prints the DASK_SCHEDULER_ADDRESS line to export.
    """
    import argparse
    import tempfile

    from bnmem.core import cpu
    from bnmem.train.cluster import LoopbackCluster

    p = argparse.ArgumentParser(prog="python -m bnmem.train.scaleout", description=main.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["env", "cluster"])
    p.add_argument("--workers", type=int, default=2, help="cluster: worker processes")
    args = p.parse_args(argv)
    if args.command == "env":
        for key, value in cpu.environment().items():
            print(f"export {key}='{value}'")
        return
    import signal

    def interrupt(signum, frame):  # `kill` (SIGTERM) stops the cluster as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)  # even when started with SIGINT ignored (`cmd &`)
    logs = Path(tempfile.mkdtemp(prefix="bnmem-dask-"))
    with LoopbackCluster(logs, workers=args.workers) as cluster:
        print(f"export DASK_SCHEDULER_ADDRESS={cluster.address}   # {args.workers} workers; "
              f"logs in {logs}; Ctrl-C stops them", flush=True)
        try:
            while all(p.poll() is None for p in [cluster.scheduler, *cluster.workers]):
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
