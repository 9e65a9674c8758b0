"""The Wiola paper's (seed 002) checkable numbers, each recomputed or measured here.

    assocmem experiment wiola-claims --mu-from probes/experiments/results/wiola-experiment.json --seeds 0 \
        --out runs/wiola-claims --result probes/experiments/results/wiola-claims.json  (registered: assocmem reproduce)

Each function returns the paper's number beside ours. FLOPs are counted by torch's
``FlopCounterMode`` on the wiola-360m modules built on the meta device (no memory, no compute;
on meta, scaled_dot_product_attention runs its matmul form, so the T² score and value products
are counted too), one sequence of T = 2048 tokens, forward pass. Memory is the model's own cache
after that forward (``AssocMemCache.state_bytes``), in bf16 as eq. 38 assumes.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from .frame import Experiment, Outcome

T_CLAIM = 2048  # the sequence length of eqs. 38 and 41


# ------------------------------------------------------------------ WiolaRMSNorm (§V)
def rmsnorm_gradient_claim(d: int = 64, rows: int = 8, seed: int = 0) -> dict:
    """Eq. 10 as printed vs autograd and central differences, random γ, δ, x and cotangent."""
    from assocmem.mixers.wiola import WiolaRMSNorm

    g = torch.Generator().manual_seed(seed)
    norm = WiolaRMSNorm(d).double()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64))
        norm.offset.copy_(0.7 * torch.randn(d, generator=g, dtype=torch.float64))
    x = torch.randn(rows, d, generator=g, dtype=torch.float64)
    cot = torch.randn(rows, d, generator=g, dtype=torch.float64)
    (norm(x) * cot).sum().backward()
    gamma, delta, eps = norm.weight.detach(), norm.offset.detach(), norm.eps
    z = x + delta
    r = torch.sqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    s = (gamma * cot * z).sum(-1, keepdim=True)
    printed = (gamma / r * (cot - z * s / (d * r**2))).sum(0)
    corrected = ((gamma * cot - z * s / (d * r**2)) / r).sum(0)

    def loss(dl):
        zz = x + dl
        return (gamma * zz * torch.rsqrt(zz.pow(2).mean(-1, keepdim=True) + eps) * cot).sum()

    h = 1e-6
    central = torch.stack([(loss(delta + h * e) - loss(delta - h * e)) / (2 * h)
                           for e in torch.eye(d, dtype=torch.float64)])
    return {"eq10_printed_vs_central_differences": float((printed - central).abs().max()),
            "eq10_corrected_vs_central_differences": float((corrected - central).abs().max()),
            "autograd_vs_central_differences": float((norm.offset.grad - central).abs().max()),
            "eq10_printed_vs_autograd_gamma_one": _printed_error_gamma_one(x, delta, cot, eps)}


def _printed_error_gamma_one(x, delta, cot, eps) -> float:
    from assocmem.mixers.wiola import WiolaRMSNorm

    norm = WiolaRMSNorm(x.shape[-1]).double()
    with torch.no_grad():
        norm.offset.copy_(delta)
    (norm(x) * cot).sum().backward()
    z = x + delta
    r = torch.sqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    printed = (1 / r * (cot - z * (cot * z).sum(-1, keepdim=True) / (x.shape[-1] * r**2))).sum(0)
    return float((printed - norm.offset.grad).abs().max())


# ------------------------------------------------------------------ SRPE (§VI)
def srpe_claims(head_dim: int = 64, theta: float = 1e4, offset: int = 8, seed: int = 0) -> dict:
    """Relativity of the score q̃(p)·k̃(p − offset) over p < T for a_s = 0 and the preset's a_s,
    and SRPE(a_s = 0) vs RoPE at frequencies × (1 + 1/k_s)."""
    from assocmem.mixers.norm import apply_rope, rope_angles
    from assocmem.mixers.wiola import SRPEOptions, srpe_angles
    from assocmem.models.presets import WIOLA_SRPE

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, head_dim, generator=g, dtype=torch.float64).expand(1, T_CLAIM - offset, 1, head_dim)
    k = torch.randn(1, 1, 1, head_dim, generator=g, dtype=torch.float64).expand(1, T_CLAIM - offset, 1, head_dim)
    p = torch.arange(offset, T_CLAIM)[None]

    def spread(options: SRPEOptions) -> float:
        cq, sq = srpe_angles(p, head_dim, theta, options, torch.float64)
        ck, sk = srpe_angles(p - offset, head_dim, theta, options, torch.float64)
        score = (apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum(-1).flatten()
        return float((score.max() - score.min()) / score.abs().mean())

    preset = SRPEOptions.model_validate(WIOLA_SRPE)
    flat = preset.model_copy(update={"a_s": 0.0})
    c, s = srpe_angles(p, head_dim, theta, flat, torch.float64)
    cr, sr = rope_angles(p * (1 + 1 / preset.k_s), head_dim, theta, torch.float64)  # Θ = (p(1+1/k_s)) ω
    return {"score_spread_a_s_0": spread(flat), f"score_spread_a_s_{preset.a_s}": spread(preset),
            "a_s_0_vs_rope_scaled_frequencies": float((apply_rope(q, c, s) - apply_rope(q, cr, sr)).abs().max()),
            "srpe_parameters": 0}


# ------------------------------------------------------------------ wiola-360m on the meta device
def _meta_model(mode: str = "causal"):
    from assocmem.models import build_model
    from assocmem.models.presets import wiola_config

    with torch.device("meta"):
        hc = wiola_config(1024, 16, 32000, 16, 4, 1024, 5120, mode=mode)
        return build_model(hc, dtype=torch.bfloat16).eval()


def _forward_flops(model, seq_len: int = T_CLAIM):
    """(total forward FLOPs, FLOPs per module name) of one sequence through ``model`` (meta device)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"), FlopCounterMode(display=False) as counter:
        out = model(inputs_embeds=torch.zeros(1, seq_len, model.config.hidden_size, dtype=torch.bfloat16))
    per_module = {name: sum(v.values()) for name, v in counter.get_flop_counts().items()}
    return counter.get_total_flops(), per_module, out


def kv_cache_claim() -> dict:
    """Eq. 38: M_KV = 2·L·H_kv·d_h·t·b at t = 2048 (paper: 67.1 MB); the model's cache after t tokens."""
    from assocmem.models import output_cache

    _, _, out = _forward_flops(_meta_model())
    arithmetic = 2 * 16 * 4 * 64 * T_CLAIM * 2
    return {"paper_MB": 67.1, "eq38_arithmetic_bytes": arithmetic,
            "model_cache_bytes": output_cache(out).state_bytes(),
            "mha_same_heads_bytes": 2 * 16 * 16 * 64 * T_CLAIM * 2,
            "paper_mha_ratio": "4-6x", "mha_ratio": 16 / 4}


def gqa_flops_claim(seq_len: int = T_CLAIM, heads: int = 16, kv_heads: int = 4, head_dim: int = 64) -> dict:
    """Eqs. 39–40: score + value FLOPs of MHA and GQA (grouped einsums, kv heads not repeated)."""
    from torch.utils.flop_counter import FlopCounterMode

    def count(hkv: int) -> int:
        with torch.device("meta"), FlopCounterMode(display=False) as counter:
            q = torch.zeros(1, hkv, heads // hkv, seq_len, head_dim)
            k = torch.zeros(1, hkv, seq_len, head_dim)
            w = torch.einsum("bgrtd,bgsd->bgrts", q, k)                  # scores
            torch.einsum("bgrts,bgsd->bgrtd", w, k)                      # weights × values
        return counter.get_total_flops()

    return {"mha_measured": count(heads), "gqa_measured": count(kv_heads),
            "eq39_mha": 4 * seq_len**2 * heads * head_dim,
            "eq40_gqa_claimed": 2 * seq_len**2 * (heads + kv_heads) * head_dim}


def gcla_overhead_claim() -> dict:
    """Eq. 41 / §VII-D: GCLA's cost over the same attention layer without it (paper: Λ/T ≈ 0.1 %)."""
    from assocmem.mixers.wiola import GCLAOptions, WiolaAttention
    from torch.utils.flop_counter import FlopCounterMode

    def layer_flops(**options) -> int:
        with torch.device("meta"):
            attn = WiolaAttention(1024, num_heads=16, head_dim=64, num_kv_heads=4, **options).to(torch.bfloat16)
            x = torch.zeros(1, T_CLAIM, 1024, dtype=torch.bfloat16)
            with FlopCounterMode(display=False) as counter:
                attn(x, streams=[x, x], return_state=False)
        return counter.get_total_flops()

    plain = layer_flops()
    out = {"attention_layer": plain, "paper_overhead": 2 / T_CLAIM}
    for mode in ("as_written", "causal"):
        gcla = layer_flops(cross_layer=GCLAOptions(mode=mode), output_gate=True)
        context_only = layer_flops(cross_layer=GCLAOptions(mode=mode))
        out[f"{mode}_overhead_with_gate"] = gcla / plain - 1
        out[f"{mode}_overhead_context_only"] = context_only / plain - 1
    return out


def atm_flops_claim(mu: float) -> dict:
    """Eq. 33 per layer and the whole-model saving of the as-written ATM (which shortens the
    sequence before the attention projections) in wiola-360m's ATM layers, forward at T = 2048."""
    model = _meta_model("as_written")
    total, per_module, _ = _forward_flops(model)
    saved = 0.0
    for i, block in enumerate(model.model.layers):
        if block.mixer.token_merge is None:
            continue
        prefix = f"AssocMemForCausalLM.model.layers.{i}.mixer"
        projections = sum(per_module.get(f"{prefix}.{p}", 0) for p in ("q_proj", "k_proj", "v_proj", "o_proj",
                                                                        "gate_proj"))
        scores = per_module[prefix] - projections - per_module.get(f"{prefix}.context", 0)
        saved += mu * projections + mu * (2 - mu) * scores
    return {"mu": mu, "delta_C_per_layer": mu * (2 - mu), "model_saving": saved / total,
            "paper_model_saving": "5-9%", "atm_layers": sum(b.mixer.token_merge is not None
                                                          for b in model.model.layers)}


def parameter_claims() -> dict:
    """§V overhead 2·L·d, §XIV tying saving, and the size of our wiola-360m shape."""
    model = _meta_model()
    params = sum(p.numel() for p in model.parameters())
    offsets = sum(p.numel() for n, p in model.named_parameters() if n.endswith("offset"))
    return {"parameters": params, "paper_parameters": 360e6, "offsets": offsets, "paper_offsets": 32768,
            "offset_share": offsets / params, "tying_saving_bytes_bf16": 32000 * 1024 * 2,
            "paper_tying_saving_MB": 65.5}


def wiola_claims(mu: float | None, seed: int = 0) -> dict:
    """Every check above; ATM's FLOPs at the measured μ (if given) and at the paper's 0.08 and 0.14;
    ``seed`` draws the random inputs of the eq. 10 and SRPE checks."""
    mus = ([("measured", mu)] if mu is not None else []) + [("paper_low", 0.08), ("paper_high", 0.14)]
    return {"rmsnorm": rmsnorm_gradient_claim(seed=seed), "srpe": srpe_claims(seed=seed), "kv_cache": kv_cache_claim(),
            "gqa_flops": gqa_flops_claim(), "gcla_overhead": gcla_overhead_claim(),
            "atm_flops": {name: atm_flops_claim(m) for name, m in mus}, "parameters": parameter_claims()}


def flat_metrics(claims: dict) -> dict[str, float]:
    """The numeric leaves as 'section/key' floats (for the result record)."""
    out = {}
    for section, values in claims.items():
        for key, value in values.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        out[f"{section}/{key}/{k}"] = float(v)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{section}/{key}"] = float(value)
    return out


def add_flags(flags) -> None:
    flags.add("--mu-from", default=None, metavar="RESULT",
              help="a wiola-experiment result record: ATM's FLOPs also at its measured μ (wiola_as_written, "
                   "train mode, mean over seeds)")


def measured_mu(args) -> float | None:
    """ATM's μ of the --mu-from record (wiola_as_written, train mode, mean over seeds), if given."""
    from assocmem.training.results import read_result

    return read_result(args.mu_from).summary["wiola_as_written/mu"].mean if args.mu_from else None


def run(mu: float | None, args, out: Path) -> Outcome:
    """``assocmem experiment wiola-claims``: every claim per seed (the seed draws the inputs of the eq. 10 and
    SRPE checks) into wiola_claims.json, and their numeric leaves for the result record."""
    import json

    claims = {str(s): wiola_claims(mu, s) for s in args.seeds}
    text = json.dumps(claims, indent=2)
    (out / "wiola_claims.json").write_text(text)
    return Outcome(text + "\n", {int(s): flat_metrics(c) for s, c in claims.items()},
                   "the Wiola paper's checkable numbers recomputed (probes/experiments/wiola_claims.py); "
                   "deterministic; the seed draws the inputs of the eq. 10 and SRPE checks",
                   {"claims": claims}, name="wiola-claims")


EXPERIMENT = Experiment("wiola-claims", help="the Wiola paper's checkable numbers (eqs. 10, 19, 33, 38–41, parameter "
                        "counts), recomputed or measured", doc=__doc__, run=run, flags=add_flags,
                        settings=measured_mu, quick=False)
