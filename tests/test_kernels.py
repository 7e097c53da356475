"""The stages' results do not depend on which PyTorch / oneDNN / MKL kernels run.

Across CPU vendors, with the AVX2 pin, what still varies is the library's choice of
implementation (oneDNN by cache size and vendor, MKL's code path): a different summation
order, so float32 results that differ in the last bits. This test varies exactly those
libraries on one machine, far more than a second vendor would (oneDNN capped at SSE4.1,
MKL's most compatible code path), and checks that every target-model measurement the
stages write is bit-identical (the shadow stage runs the same C kernels): LeNet training and its per-epoch records, gamma/sigma,
per-sample gradient norms (both definitions), gamma push, the report's correctness, the
exposure stage's target signals and the theory stage's rounded float64 results. Its
control: PyTorch's own float32 forward of the same model *does* change bits between the
two settings, so the probe reaches kernels that differ (else the test is skipped). The
batch-coupled norms of a float64 copy, unrounded, change too (by about 1e-14 here: MKL's
code path): the rounding to float32 is what makes `batch_norms` equal. It is a rounding,
not a proof: a value within float64's error of a float32 rounding boundary could still
flip (rare). The probe's data are random images, 2 epochs, one arm (batchnorm).
numpy and OpenBLAS stay pinned: they dispatch by instruction set only, which the pin fixes
on every vendor.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# the other setting: the libraries that pick an implementation at run time by more than
# the instruction set (oneDNN by ISA, cache sizes and vendor; MKL by code path), moved far
# off the pin. PyTorch's own dispatch (ATEN_CPU_CAPABILITY) stays pinned: it picks by
# instruction set only, the same on every vendor under the pin (at its DEFAULT level the
# optimizer's elementwise kernels round differently, so the LeNet weights would change).
MOVED = {"ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"}


def probe(out: Path) -> None:
    import copy

    import bnmem  # noqa: F401  (pins numpy / OpenBLAS; a variable set in the env wins)
    import numpy as np
    import torch

    from conftest import tiny_target
    from bnmem.exposure.scores import target_signals
    from bnmem.grads.per_sample import grad_norms
    from bnmem.core.io import significant
    from bnmem.data.pool import tensors
    from bnmem.train.stacked import eval_logits
    from bnmem.train.target_metrics import gamma_push, gamma_sigma
    from bnmem.train.target import train_target
    from bnmem.theory.mechanism import run_theory
    from bnmem.core.schedule import batch_order
    from bnmem.models.runtime import predict

    torch.set_num_threads(1)
    n = 192
    cfg, pool, test = tiny_target(out.parent, n, 48, flipped=16)  # a few flipped: gamma push
    model, history, target = train_target(cfg, "batchnorm", pool, test)
    meta = target.spec
    x, y = tensors(pool, cfg.dataset)
    batches = batch_order(n, 32, 1, 3)[0]
    arrays = {f"state/{k}": v.numpy() for k, v in model.state_dict().items()}
    arrays["eval_norms"] = grad_norms(model, x, y, "eval").norms
    arrays["batch_norms"] = grad_norms(model, x, y, "batch", batches=batches).norms
    arrays["report_logits"] = eval_logits(model, meta, x).numpy()
    sig = target_signals(model, x, pool["y_train"], ("identity", "hflip"), meta)
    arrays.update(phi=sig.phi, logp=sig.logp)
    arrays["control_torch_forward"] = predict(model, x).numpy()  # expected to differ
    m64 = copy.deepcopy(model).double()  # float64 without the rounding to float32
    arrays["float64_batch_norms"] = grad_norms(m64, x.double(), y, "batch", batches=batches).norms
    records = {"history": [{k: v for k, v in h.items() if k != "seconds"} for h in history], "gamma_sigma": gamma_sigma(model),
               "gamma_push": gamma_push(model, x, pool["y_train"],
                                        {"clean": pool["kind"] == 0, "flipped": pool["kind"] == 1}),
               "theory": significant(run_theory(0, gammas=(0.5, 2.0), etas=(1e-2, 1e-3),
                                                replicates=2, steps=20)[0])}
    np.savez(out, **arrays)
    out.with_suffix(".json").write_text(json.dumps(records, sort_keys=True, default=float))


def _run(tmp: Path, env: dict) -> tuple[dict, str]:
    import numpy as np
    tmp.mkdir()
    out = tmp / "probe.npz"
    r = subprocess.run([sys.executable, __file__, str(out)], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with np.load(out) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, out.with_suffix(".json").read_text()


def test_target_measurements_do_not_depend_on_torch_kernels(tmp_path):
    import numpy as np
    a, ja = _run(tmp_path / "pinned", {})  # the pin (this process's environment)
    b, jb = _run(tmp_path / "moved", MOVED)
    if np.array_equal(a["control_torch_forward"], b["control_torch_forward"]):
        pytest.skip("PyTorch's float32 forward is the same under both kernel settings on this "
                    "machine: the probe could not tell a kernel-dependent result")
    controls = ("control_torch_forward", "float64_batch_norms")
    differ = [k for k in a if k not in controls
              and not np.array_equal(a[k], b[k], equal_nan=True)]
    assert not differ, f"results that changed with PyTorch's kernels: {differ}"
    assert ja == jb, "per-epoch records, gamma/sigma, gamma push or theory changed with the kernels"


if __name__ == "__main__":
    probe(Path(sys.argv[1]))
