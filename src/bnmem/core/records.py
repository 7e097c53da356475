"""Typed records that stages hand each other: the `ModelSpec` that rebuilds an arm's module
(bnmem.models.spec.build) and the `TargetRecord` the train stage writes as
`data/models/<arm>.json` (the spec's fields, flat, beside the final metrics), which the
grads, exposure, replicate and report stages read. Plain data: no torch."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from bnmem.core.io import InputError, load_json, save_json


@dataclass(frozen=True)
class ModelSpec:
    """What make_model needs to rebuild an arm's module; for your own model factory also
    `swapped`, the BatchNorm layers bnmem replaced by the arm's norm, and for a DP arm
    `inplace_off`, the in-place activations switched off for Opacus (bnmem.train.dp)."""
    arch: str
    norm: str
    arm: str
    num_classes: int
    in_channels: int
    width: int
    image_size: int
    dataset: str
    zero_init_residual: bool = False
    init: str = "default"
    swapped: tuple[str, ...] | None = None
    inplace_off: tuple[str, ...] | None = None  # DP arms: in-place activations switched off

    def to_json(self) -> dict:
        """The fields in `<arm>.json`'s order; the optional ones only where set (so the
        default runs' files stay byte-identical)."""
        out = {k: v for k, v in asdict(self).items()
               if k not in ("zero_init_residual", "init", "swapped", "inplace_off")}
        if self.zero_init_residual:
            out["zero_init_residual"] = True
        if self.init != "default":
            out["init"] = self.init
        if self.swapped is not None:
            out["swapped"] = list(self.swapped)
        if self.inplace_off:
            out["inplace_off"] = list(self.inplace_off)
        return out

    @classmethod
    def from_json(cls, raw: dict) -> ModelSpec:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in raw.items() if k in names}
        for key in ("swapped", "inplace_off"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)



@dataclass
class TargetRecord:
    """`data/models/<arm>.json`: the spec, the final epoch's metrics, the checkpoint epochs,
    gamma/sigma per BN layer, the gamma push (BN models) and the CPU kernels that ran."""
    spec: ModelSpec
    metrics: dict
    checkpoints: list[int]
    gamma_sigma: dict
    gamma_push: dict | None = None
    cpu_kernels: dict | None = None

    def to_json(self) -> dict:
        out = {**self.spec.to_json(), "metrics": self.metrics, "checkpoints": self.checkpoints,
               "gamma_sigma": self.gamma_sigma}
        if self.gamma_push is not None:
            out["gamma_push"] = self.gamma_push
        if self.cpu_kernels is not None:
            out["cpu_kernels"] = self.cpu_kernels
        return out

    def save(self, path: str | Path) -> None:
        save_json(path, self.to_json())

    @classmethod
    def from_json(cls, raw: dict, source: str = "<arm>.json") -> TargetRecord:
        try:
            return cls(ModelSpec.from_json(raw), raw["metrics"], list(raw["checkpoints"]),
                       raw.get("gamma_sigma") or {}, raw.get("gamma_push"), raw.get("cpu_kernels"))
        except (AttributeError, KeyError, TypeError) as exc:
            raise InputError(f"{source}: not a train stage record ({exc}); re-run train@<arm>") from None

    @classmethod
    def load(cls, path: str | Path) -> TargetRecord:
        return cls.from_json(load_json(path), str(path))
