"""The frozen reference model of the KL term: loading, the same-architecture check, its identity.

The reference is ``reference:`` of the config, else the policy's ``model.init_from``, else a copy of
the initial policy. It must be the policy's architecture (same model_type and the same parameter
names and shapes): a KL between different networks' token distributions is well defined, but a
reference of another architecture is almost always a wrong path. Its identity (SHA-256 over its
weights) goes into every checkpoint, so a resumed run is refused if its reference changed.
"""
from __future__ import annotations

import copy
import hashlib

import torch
from torch import nn

from ..model_factory import load_pretrained


def weights_digest(model: nn.Module) -> str:
    """SHA-256 over the state dict (names, dtypes, shapes and bytes, in order)."""
    digest = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def architecture_mismatch(policy: nn.Module, reference: nn.Module) -> list[str]:
    """What differs between two networks' architectures (empty: the same)."""
    a, b = getattr(policy.config, "model_type", None), getattr(reference.config, "model_type", None)
    if a != b:
        return [f"model_type: policy {a!r}, reference {b!r}"]
    ps = {k: tuple(v.shape) for k, v in policy.state_dict().items()}
    rs = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    out = [f"{k}: policy {ps.get(k)}, reference {rs.get(k)}" for k in sorted(set(ps) | set(rs)) if ps.get(k) != rs.get(k)]
    return out[:5] + ([f"... and {len(out) - 5} more"] if len(out) > 5 else [])


def load_reference(source: str | None, policy: nn.Module) -> tuple[nn.Module, str]:
    """(frozen reference in eval mode, a description of where it came from)."""
    if source is None:
        reference, where = copy.deepcopy(policy), "the initial policy"
    else:
        try:
            reference, where = load_pretrained(source), source
        except (FileNotFoundError, ValueError) as err:
            raise ValueError(f"reference: {err}") from None
    reference = reference.to(next(policy.parameters()).device)
    differences = architecture_mismatch(policy, reference)
    if differences:
        raise ValueError(f"reference={source} holds another architecture than the policy; a KL reference must be "
                         f"the same network (e.g. the SFT model the policy starts from): {'; '.join(differences)}")
    reference.eval().requires_grad_(False)
    return reference, where
