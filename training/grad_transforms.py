"""Gradient transforms: ``train.grad_transforms``, applied to the gradients of every optimizer step
after the backward pass and the DDP all-reduce, before clipping and the optimizer step.

    train:
      grad_transforms:
        - {kind: pfft, param: model.embed_tokens.weight, length: 97, prescription: wrong_high}
        - {kind: grokfast_ema, alpha: 0.98, lamb: 2.0}

    kind           G ← …                                                     state (in checkpoints)
    fgp            irfft(rfft(G, dim=axis) ⊙ 1[k ∈ S], n)  (seed 003 eq. 4)   —
    pfft           fgp with S a prescription of seed 003 Table 1             —
    fgp_adaptive   fgp with S = the top-K modes of P(k) this step (§4.3;     —
                   fourier_power: how P(k) reads eq. 5, training/fourier.py)
    grokfast_ema   μ ← α μ + (1 − α) G;  G ← G + λ μ  (Lee et al. 2024)       μ per parameter

The transforms run in the listed order. They read gradients that every process holds
identically (after the all-reduce), so N processes follow the one-process trajectory, and
their state is saved in every checkpoint, so a resumed run continues bit for bit.
"""
from __future__ import annotations

import fnmatch
from typing import Annotated, Literal, Union

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from .fourier import FourierPower, check_modes, mode_power, project_modes, top_modes

# Seed 003, Table 1 (p = 97) and Table 2 (p = 113): the fixed prescriptions S of PFFT.
# ``no_low`` is every mode k ≥ 4 up to ⌊n/2⌋, so it depends on the transformed length n.
PRESCRIPTIONS: dict[str, tuple[int, ...] | str] = {
    "fundamental": (1,),
    "k1k2": (1, 2),
    "quint": (1, 2, 3, 4, 5),
    "triad": (1, 5, 10),
    "wrong_even": (2, 10, 20, 30, 40),
    "nanda3": (1, 14, 41),
    "wrong_high": (30, 35, 40, 45, 48),
    "no_low": "k >= 4",
    "spread5_p113": (34, 40, 46, 51, 56),
}


def prescription_modes(name: str, n: int) -> list[int]:
    """The modes S of a named prescription for a transformed length n."""
    if name not in PRESCRIPTIONS:
        raise ValueError(f"unknown PFFT prescription {name!r}; choose one of {list(PRESCRIPTIONS)}")
    modes = PRESCRIPTIONS[name]
    return list(range(4, n // 2 + 1)) if modes == "k >= 4" else list(modes)


# ---------------------------------------------------------------- configs
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every float finite


class _OnAxis(_Strict):
    param: str = Field(description="parameter name in model.named_parameters(), e.g. model.embed_tokens.weight")
    axis: int = Field(0, description="the axis whose Fourier modes are kept (0 = rows: the token axis)")
    length: int | None = Field(None, ge=2, description="transform the first `length` indices of the axis only "
                               "(the p number tokens of a vocabulary that also holds '='); null = the whole axis")


class FGPConfig(_OnAxis):
    """Fourier Gradient Projection onto the modes S (seed 003 eq. 4)."""

    kind: Literal["fgp"] = "fgp"
    modes: list[int] = Field(description="S: rfft bins kept, each in 0..⌊n/2⌋ (0 = the mean over the axis)")


class PFFTConfig(_OnAxis):
    """Prescribed Fourier Frequency Training: FGP with a fixed set of seed 003 Table 1."""

    kind: Literal["pfft"] = "pfft"
    prescription: Literal[tuple(PRESCRIPTIONS)] = Field(  # type: ignore[valid-type]
        description="fundamental {1}, k1k2 {1,2}, quint {1..5}, triad {1,5,10}, wrong_even {2,10,20,30,40}, "
        "nanda3 {1,14,41}, wrong_high {30,35,40,45,48}, no_low {k>=4}, spread5_p113 {34,40,46,51,56}")


class AdaptiveFGPConfig(_OnAxis):
    """Adaptive FGP (seed 003 §4.3): S = the top-K modes by gradient power P(k), chosen every step."""

    kind: Literal["fgp_adaptive"] = "fgp_adaptive"
    top_k: int = Field(5, gt=0, description="K: modes kept each step")
    skip_dc: bool = Field(True, description="choose among the modes k = 1..⌊n/2⌋ (eq. 1's K ⊂ {1..p/2}); "
                          "false also lets bin 0 (the mean over the axis) be chosen")
    fourier_power: FourierPower = Field(
        "power_of_sum", description="P(k) of eq. 5: power_of_sum = |rfft(G summed over the other axes)[k]|² (seed 003 "
        "§4.1: 'G is summed over the embedding dimension'); sum_of_powers = Σ over the other axes of |rfft(G)[k]|²")


class GrokfastEMAConfig(_Strict):
    """GrokFast-EMA (Lee et al. 2024, `gradfilter_ema`): amplify the slow component of the gradient."""

    kind: Literal["grokfast_ema"] = "grokfast_ema"
    alpha: float = Field(0.98, ge=0, lt=1, description="EMA momentum α (the paper's default 0.98)")
    lamb: float = Field(2.0, ge=0, description="amplification λ (the paper's default 2.0)")
    params: list[str] = Field(["*"], description="glob patterns of parameter names it applies to (default: all)")


GradTransformConfig = Annotated[Union[FGPConfig, PFFTConfig, AdaptiveFGPConfig, GrokfastEMAConfig],
                                Field(discriminator="kind")]


# ---------------------------------------------------------------- transforms
def _parameter(model: nn.Module, name: str) -> nn.Parameter:
    params = dict(model.named_parameters())
    if name not in params:
        raise ValueError(f"grad transform: no parameter {name!r} in {type(model).__name__}; parameters: "
                         f"{list(params)}")
    return params[name]


class FourierProjection:
    """fgp / pfft / fgp_adaptive: project one parameter's gradient onto Fourier modes along an axis."""

    def __init__(self, cfg: FGPConfig | PFFTConfig | AdaptiveFGPConfig, model: nn.Module):
        self.cfg, self.param = cfg, _parameter(model, cfg.param)
        shape = tuple(self.param.shape)
        if not -len(shape) <= cfg.axis < len(shape):
            raise ValueError(f"grad transform {cfg.kind}: axis {cfg.axis} is out of range for {cfg.param} of "
                             f"shape {shape}")
        self.n = shape[cfg.axis] if cfg.length is None else cfg.length
        if not 2 <= self.n <= shape[cfg.axis]:
            raise ValueError(f"grad transform {cfg.kind}: length {self.n} must lie in [2, {shape[cfg.axis]}] "
                             f"(axis {cfg.axis} of {cfg.param}, shape {shape})")
        self.modes: list[int] | None = None
        if isinstance(cfg, FGPConfig):
            self.modes = check_modes(cfg.modes, self.n)
        elif isinstance(cfg, PFFTConfig):
            self.modes = check_modes(prescription_modes(cfg.prescription, self.n), self.n)
        elif not 1 <= cfg.top_k <= self.n // 2 + (0 if cfg.skip_dc else 1):
            raise ValueError(f"fgp_adaptive: top_k={cfg.top_k} exceeds the {self.n // 2} modes of length {self.n}")

    def modes_now(self, grad: torch.Tensor) -> list[int]:
        """S for this step: the fixed set, or the top-K modes of this gradient."""
        if self.modes is not None:
            return self.modes
        power = mode_power(grad, axis=self.cfg.axis, n=self.n, power=self.cfg.fourier_power)
        return top_modes(power, self.cfg.top_k, skip_dc=self.cfg.skip_dc)

    @torch.no_grad()
    def apply(self) -> None:
        grad = self.param.grad
        if grad is not None:
            grad.copy_(project_modes(grad, self.modes_now(grad), axis=self.cfg.axis, n=self.n))

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"grad transform {self.cfg.kind} has no state, the checkpoint holds {sorted(state)}")


class GrokfastEMA:
    """μ_n ← α μ_n + (1 − α) g_n; g_n ← g_n + λ μ_n for every selected parameter n with a gradient.

    μ starts at the first gradient seen (so the first step gives g (1 + λ)), as in ironjr/grokfast.
    """

    def __init__(self, cfg: GrokfastEMAConfig, model: nn.Module):
        self.cfg = cfg
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = {n: p for n, p in model.named_parameters()
                       if p.requires_grad and any(fnmatch.fnmatchcase(n, g) for g in cfg.params)}
        unmatched = [g for g in cfg.params if not any(fnmatch.fnmatchcase(n, g) for n in names)]
        if unmatched:
            raise ValueError(f"grokfast_ema: patterns {unmatched} match no trainable parameter; parameters: {names}")
        self.ema: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def apply(self) -> None:
        a, lamb = self.cfg.alpha, self.cfg.lamb
        for name, p in self.params.items():
            if p.grad is None:
                continue
            g = p.grad
            mu = self.ema.get(name, g)          # the first step starts from μ = g
            mu = mu * a + g * (1 - a)           # written as the reference does, so results agree bit for bit
            self.ema[name] = mu
            p.grad.copy_(g + mu * lamb)

    def state_dict(self) -> dict:
        return {name: t.clone() for name, t in self.ema.items()}

    def load_state_dict(self, state: dict) -> None:
        unknown = sorted(set(state) - set(self.params))
        if unknown:
            raise ValueError(f"grokfast_ema: the checkpoint holds EMA state for {unknown}, which this run does not "
                             f"transform")
        self.ema = {name: state[name].to(self.params[name].device).clone() for name in state}


KINDS = {"fgp": FourierProjection, "pfft": FourierProjection, "fgp_adaptive": FourierProjection,
         "grokfast_ema": GrokfastEMA}


class GradTransforms:
    """The configured transforms of a run, applied in order; state as a list of per-transform dicts."""

    def __init__(self, configs: list, model: nn.Module):
        self.configs = list(configs)
        self.transforms = [KINDS[c.kind](c, model) for c in self.configs]

    def __len__(self) -> int:
        return len(self.transforms)

    def apply(self) -> None:
        for t in self.transforms:
            t.apply()

    def state_dict(self) -> list[dict]:
        return [{"kind": c.kind, "state": t.state_dict()} for c, t in zip(self.configs, self.transforms)]

    def load_state_dict(self, states: list[dict]) -> None:
        kinds = [s["kind"] for s in states]
        if kinds != [c.kind for c in self.configs]:
            raise ValueError(f"the checkpoint was written with grad transforms {kinds}, this run has "
                             f"{[c.kind for c in self.configs]}; resume with the same train.grad_transforms")
        for t, s in zip(self.transforms, states):
            t.load_state_dict(s["state"])
