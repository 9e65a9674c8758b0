"""The whole model by kernel backend "fla" against the same weights by "torch" (``verify --device cuda``).

``mixers/verify.py`` holds each op and each Mixer to the derivation per backend; here one hybrid model
per class FLA covers is run twice, every recurrent layer on FLA's kernels and then on the eager torch
forms, with the same weights and the same token ids:

    1. build a tiny hybrid "<preset>,attn" (``PATTERNS``) and a copy with the same state dict;
    2. set_backend(copy, "fla"), set_backend(model, "torch") (mixers/layer.py);
    3. under autocast in ``dtype`` (none for float32): logits and the gradient of the loss with respect
       to the input embeddings, for a batch whose second row is right-padded (attention_mask);
    4. max relative error of both against the torch run, held to ``MODEL_RTOL``.

A pattern whose layers FLA refuses on this device (``mixers/kernels.py fla_status``) is left out, as
``verify_backends`` leaves out refused ops. ``env`` injects FLA's availability and kernels (``FlaEnv``),
so the same path runs on CPU with FLA's naive references in place of its Triton kernels.
"""
from __future__ import annotations

import torch

from assocmem.mixers.layer import check_backend, set_backend
from assocmem.mixers.verify import PairResult, max_abs_error

from .config import HybridConfig
from .presets import build_model

# one hybrid per FLA kernel class (hebbian scalar / per-key decay, delta, gated delta, KDA, DPLR)
PATTERNS = ("gated_deltanet,attn", "mamba2,attn", "gla,attn", "deltanet,attn", "kda,attn", "rwkv7_dplr,attn")
# logits and embedding gradients of a 2-layer model, fla against torch: the layers' own tolerances
# (mixers/verify.py LAYER_RTOL) carried through one attention layer and the head
MODEL_RTOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2}


def model_backend_pairs(device: torch.device | str, dtype: torch.dtype, *, env=None,
                        patterns: tuple[str, ...] = PATTERNS, seed: int = 0, T: int = 40) -> list[PairResult]:
    """One ``PairResult`` per pattern: the model by backend "fla" against "torch" (module docstring)."""
    device = torch.device(device)
    out = []
    for pattern in patterns:
        torch.manual_seed(seed)
        hc = HybridConfig(layers=pattern, d_model=64, num_heads=2, vocab_size=97, mlp_ratio=2.0)
        ref, fla = build_model(hc).to(device), build_model(hc).to(device)
        fla.load_state_dict(ref.state_dict())
        set_backend(ref, "torch")
        set_backend(fla, "fla", fla_env=env)
        pair = f"model {pattern}: backend fla vs torch [{device.type}, {str(dtype).removeprefix('torch.')}]"
        try:
            check_backend(fla, device, dtype)
        except ValueError:  # FLA refuses one of its layers here: `assocmem derive` says why
            continue
        try:
            err = _model_error(ref, fla, hc.vocab_size, device, dtype, seed, T)
        except Exception as exc:  # a failing backend is a failed pair, reported with its reason
            out.append(PairResult("model", f"{pair} [error: {type(exc).__name__}: {exc}]", float("inf"), False,
                                  MODEL_RTOL[dtype]))
            continue
        out.append(PairResult("model", pair, err, err <= MODEL_RTOL[dtype], MODEL_RTOL[dtype]))
    return out


def _model_error(ref, fla, vocab: int, device: torch.device, dtype: torch.dtype, seed: int, T: int) -> float:
    """Max relative error of fla's logits and embedding gradient against ref's (step 3)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (2, T), generator=g).to(device)
    mask = torch.ones_like(ids)
    mask[1, T - T // 4:] = 0  # right padding in the second row
    runs = []
    for model in (ref, fla):
        emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(inputs_embeds=emb, attention_mask=mask).logits
        loss = torch.nn.functional.cross_entropy(logits.float()[mask.bool()], ids[mask.bool()])
        grad, = torch.autograd.grad(loss, emb)
        keep = mask.bool()
        runs.append({"output": [logits.detach()[keep].double().cpu()], "state": [],
                     "grad": {"embeddings": grad[keep].double().cpu()}})
    return max_abs_error(runs[0], runs[1], relative=True)
