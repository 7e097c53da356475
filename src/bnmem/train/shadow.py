"""Shadow models for LiRA: a balanced keep matrix, per-model seeds, eval-mode queries.

A shard trains its models and saves each finished model's logits at once under a
`.partial` folder beside the shard, stamped with a fingerprint of everything that
determines them; a rerun after a kill reuses matching parts and trains only the rest.
"""
from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from bnmem.core.config import Config, dp_arm
from bnmem.core.recipes import budget_epochs, budget_recipe, tracked_epochs
from bnmem.core.io import save_npz
from bnmem.core.keep import keep_matrix
from bnmem.core.margin import logit_margin
from bnmem.core.records import ModelSpec
from bnmem.models.spec import model_spec
from bnmem.data.pool import tensors
from bnmem.core.rng import SALT
from bnmem.train.stacked import predict_states, train_stack
from bnmem.train.views import augment
from bnmem.models.runtime import map_single_threaded, resolve_device

log = logging.getLogger(__name__)


def model_seeds(seed: int, model_id: int) -> tuple[int, int]:
    """(init seed, batch-order seed) of shadow model `model_id`; the same for every arm."""
    a, b = np.random.SeedSequence([seed, SALT["shadow_model"], model_id]).generate_state(2)
    return int(a), int(b)


def shard_ids(n_models: int, shards: int, shard: int) -> np.ndarray:
    """Global model ids of one shard: a contiguous block of n_models / shards ids."""
    per = n_models // shards
    return np.arange(shard * per, (shard + 1) * per, dtype=np.int64)


def query_states(spec: ModelSpec, states: list[dict], x: torch.Tensor, queries: tuple[str, ...],
                 device: torch.device | str = "cpu", workers: int = 1) -> np.ndarray:
    """float32 [K, N, Q, C]: `query` for K trained models at once (bnmem.train.stacked).

    workers (CPU): the queries and groups of models run on that many threads; a model's
    logits never depend on which models share its call (predict_states), so the bits are
    those of one call."""
    views = {q: augment(x, q) for q in queries}
    if torch.device(device).type != "cpu":
        workers = 1
    groups = [g for g in np.array_split(np.arange(len(states)), max(1, min(workers, len(states))))
              if len(g)]
    items = [(q, g) for q in queries for g in groups]
    parts = map_single_threaded(
        lambda item: predict_states(spec, [states[i] for i in item[1]], views[item[0]], device),
        items, workers)
    per_query = [torch.cat(parts[j * len(groups):(j + 1) * len(groups)])
                 for j in range(len(queries))]
    return torch.stack(per_query, dim=2).numpy()


def fingerprint(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:32]


def load_part(path: Path, stamp: str) -> dict[str, np.ndarray] | None:
    """Arrays of a finished model from an earlier, killed run, if it matches `stamp`."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            part = {k: z[k] for k in z.files}
    except Exception:  # a part cut short by the kill: retrain that model
        return None
    if "stamp" not in part or str(part.pop("stamp")) != stamp:
        return None
    return part


def save_part(path: Path, arrays: dict[str, np.ndarray], stamp: str) -> None:
    save_npz(path, **arrays, stamp=np.array(stamp))


def epoch_signals(labels: torch.Tensor):
    """A train_stack `track`: eval logits [N, C] -> (phi float32 [N], correct bool [N]),
    the identity-query LiRA signal and whether the training label is predicted."""
    y = labels.numpy()

    def track(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        z = logits.numpy()
        return logit_margin(z, y).astype(np.float32), z.argmax(1) == y
    return track


def grad_model(model_id: int, grad_models: int) -> bool:
    """Whether a shadow model's gradient norms are recorded: one model per complementary
    pair (even ids) of the first `grad_models` pairs."""
    return model_id % 2 == 0 and model_id < 2 * grad_models


def endpoint_norms(cfg: Config, spec: ModelSpec, states: list[dict], x: torch.Tensor,
                   y: torch.Tensor, device, rows: np.ndarray) -> np.ndarray:
    """float32 [endpoints, N]: per-sample gradient norms (eval definition: running
    statistics, each sample's loss on its own) of one shadow model at each endpoint, on
    the samples it trained on (`rows`, bool [N]; nan elsewhere: the claims read IN
    samples only)."""
    from bnmem.grads.per_sample import grad_norms
    from bnmem.models.spec import build
    model = build(spec).to(device)
    idx = torch.as_tensor(np.flatnonzero(rows))
    xs, ys = x[idx].to(device), y[idx].to(device)
    out = np.full((len(states), len(y)), np.nan, np.float32)
    for e, state in enumerate(states):
        model.load_state_dict(state)
        out[e, idx.numpy()] = grad_norms(model, xs, ys, "eval", cfg.grads.chunk_size).norms
    return out


def train_chunk(cfg: Config, arm: str, x: torch.Tensor, y: torch.Tensor, keep: np.ndarray,
                ids: list[int], workers: int) -> list[dict[str, np.ndarray]]:
    """Train and query shadow models `ids` of one arm (rows of the full `keep` matrix) as one
    stack (bnmem.train.stacked): per model, its part arrays (logits [N, Q, C] and, with
    shadow.track_epochs, epoch_phi [E, N] float32 and epoch_correct [E, N] bool at the
    E epochs of bnmem.core.recipes.tracked_epochs; with
    shadow.budgets, budget_logits [B, N, Q, C]: the same model retrained as a complete run of
    each budget, its own schedule annealed at its own end) and its final loss ("loss"). Each model's bits depend on its id only, not on which models share
    its chunk, nor on `workers`, nor on the process that runs it (bnmem.train.scaleout)."""
    s = cfg.shadow
    spec = model_spec(cfg, arm, x.shape[1], x.shape[2])
    track = epoch_signals(y) if s.track_epochs else None
    seeds = [model_seeds(cfg.seed, j) for j in ids]
    states, hists, tracked = train_stack(cfg, arm, x, y, keep[ids], spec,
                                         [a for a, _ in seeds], [b for _, b in seeds],
                                         workers=workers, track=track,
                                         track_at=tracked_epochs(cfg))
    device = resolve_device(cfg.train.device)
    logits = query_states(spec, states, x, s.queries, device, workers)
    budget_logits, endpoint_states = [], []  # annealed endpoints: same models, shorter schedules
    endpoint_hists = []
    for b in budget_epochs(cfg):
        short = budget_recipe(cfg, b)
        b_states, b_hists, _ = train_stack(short, arm, x, y, keep[ids], spec,
                                           [a for a, _ in seeds], [o for _, o in seeds],
                                           workers=workers)
        budget_logits.append(query_states(spec, b_states, x, s.queries, device, workers))
        endpoint_states.append(b_states)
        endpoint_hists.append(b_hists)
    endpoint_states.append(states)
    endpoint_hists.append(hists)
    # the gradient models' norms side by side (each computed as alone: one torch thread)
    graded = [k for k in range(len(ids)) if grad_model(ids[k], s.grad_models)]
    norms = dict(zip(graded, map_single_threaded(
        lambda k: endpoint_norms(cfg, spec, [st[k] for st in endpoint_states], x, y, device,
                                 keep[ids[k]]),
        graded, workers if torch.device(device).type == "cpu" else 1)))
    out = []
    for k, (lg, hist, tr) in enumerate(zip(logits, hists, tracked)):
        arrays = {"logits": lg}
        if dp_arm(arm):  # each endpoint's own DP accounting (bnmem.train.dp), budgets then final
            arrays["dp_noise_multiplier"] = np.array([h[k][-1]["noise_multiplier"]
                                                      for h in endpoint_hists])
            arrays["dp_epsilon"] = np.array([h[k][-1]["epsilon"] for h in endpoint_hists])
            arrays["dp_epsilon_substitution"] = np.array([h[k][-1]["epsilon_substitution"]
                                                          for h in endpoint_hists])
        if track is not None:
            arrays["epoch_phi"] = np.stack([p for p, _ in tr])
            arrays["epoch_correct"] = np.stack([c for _, c in tr])
        if budget_logits:
            arrays["budget_logits"] = np.stack([bl[k] for bl in budget_logits])
        if k in norms:
            arrays["grad_norms"] = norms[k]
        out.append({"arrays": arrays, "loss": float(hist[-1]["loss"])})
    return out


def train_shadows(cfg, arm: str, x: torch.Tensor, y: torch.Tensor, keep: np.ndarray,
                  ids: np.ndarray, parts: Path, base: str, progress: str = "",
                  execution=None) -> dict:
    """Train and query shadow models `ids` of one arm (rows of the full `keep` matrix).

    Models train `cfg.shadow.chunk` at a time (train_chunk), here or, with an `execution`
    ShadowConfig whose backend is dask, as tasks on a Dask cluster (bnmem.train.scaleout); each
    finished model's arrays are saved under `parts` stamped with fingerprint(base, id), so
    a rerun after a kill trains only the missing ones. Returns the shard arrays: logits
    [m, N, Q, C], keep [m, N], model_ids [m] and, with shadow.track_epochs, epoch_phi
    [m, E, N] float32 and epoch_correct [m, E, N] bool (identity query, eval mode, after
    each epoch of `tracked_epochs` [E]: every epoch, or train.checkpoints and the final
    one) and, with shadow.budgets, budget_logits [m, B, N, Q, C] float32 (each model
    retrained as a complete run of each budget's epochs, same seeds and keep) and budgets [B].
    """
    s = cfg.shadow
    stamp = {int(j): fingerprint(base, str(j)) for j in ids}
    done = {int(j): load_part(parts / f"model_{j}.npz", stamp[int(j)]) for j in ids}
    todo = [j for j in done if done[j] is None]
    log.info("%s %s: %d models, %d resumed", arm, progress, len(ids), len(ids) - len(todo))
    chunks = [todo[k:k + s.chunk] for k in range(0, len(todo), s.chunk)]
    bar = tqdm(total=len(todo), desc=f"shadow {arm} {progress}".strip())

    def finished(chunk: list[int], models: list[dict], seconds: float, where: str) -> None:
        for j, model in zip(chunk, models):
            save_part(parts / f"model_{j}.npz", model["arrays"], stamp[j])
            done[j] = model["arrays"]
            log.info("%s model %d: %d samples, final loss %.4f", arm, j, keep[j].sum(),
                     model["loss"])
        log.info("%s: models %s in %.1f s%s", arm, chunk, seconds, where)
        bar.update(len(chunk))

    try:
        if execution is not None and execution.backend == "dask" and chunks:
            from bnmem.train import scaleout
            scaleout.run_chunks(cfg, arm, x, y, keep, chunks, execution, finished, parts)
        else:
            for chunk in chunks:
                t0 = time.perf_counter()
                finished(chunk, train_chunk(cfg, arm, x, y, keep, chunk, s.workers),
                         time.perf_counter() - t0, "")
    finally:
        bar.close()  # ends its line: an error's one line starts on its own
    out = {"logits": np.stack([done[int(j)]["logits"] for j in ids]).astype(np.float32),
           "keep": keep[ids], "model_ids": np.asarray(ids, dtype=np.int64)}
    if s.track_epochs:
        out["epoch_phi"] = np.stack([done[int(j)]["epoch_phi"] for j in ids]).astype(np.float32)
        out["epoch_correct"] = np.stack([done[int(j)]["epoch_correct"] for j in ids])
        out["tracked_epochs"] = np.asarray(tracked_epochs(cfg), dtype=np.int64)
    grad_ids = [int(j) for j in ids if grad_model(j, s.grad_models)]
    if grad_ids:
        out["grad_norms"] = np.stack([done[j]["grad_norms"] for j in grad_ids])
        out["grad_model_ids"] = np.asarray(grad_ids, dtype=np.int64)
    if dp_arm(arm):  # [m, endpoints]: the budgets' runs, then the train.epochs run
        for key in ("dp_noise_multiplier", "dp_epsilon", "dp_epsilon_substitution"):
            out[key] = np.stack([done[int(j)][key] for j in ids])
    if budget_epochs(cfg):
        out["budget_logits"] = np.stack([done[int(j)]["budget_logits"] for j in ids]).astype(np.float32)
        out["budgets"] = np.asarray(budget_epochs(cfg), dtype=np.int64)
    return out


def shadow_shard(cfg: Config, pool: dict, shard: int, partial_dir: Path,
                 resume_key: Callable[[], str], progress: str | None = None,
                 execution=None) -> dict[str, np.ndarray]:
    """Train and query the recipe arm's shadow models of one shard (balanced keep matrix
    in complementary pairs); finished models are kept in `partial_dir` under a key from
    `resume_key()` (recipe + pool + seed), so a killed run resumes. `execution`: the
    ShadowConfig whose backend / resources / retries / tls say where chunks run (None:
    here)."""
    s = cfg.shadow
    x, y = tensors(pool, cfg.dataset)
    keep = keep_matrix(s.n_models, len(y), cfg.seed)
    ids = shard_ids(s.n_models, s.shards, shard)
    return train_shadows(cfg, cfg.arms[0], x, y, keep, ids, partial_dir, resume_key(),
                         progress=progress, execution=execution)


def resume_key(recipe: Path, pool: Path, *extra: str) -> Callable[[], str]:
    """The shadow stage's resume fingerprint of a recipe file and a pool file (+ extras)."""
    return lambda: fingerprint(recipe.read_text(), *extra,
                               hashlib.sha256(pool.read_bytes()).hexdigest())
