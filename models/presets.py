"""Model presets from the seed documents, and tiny versions for tests and CPU runs.

nautile-370m (Nautile paper §2.1): d_model 1024, 24 layers
"sca,sca,attn" (16 SCA + 8 attention), attention 16 heads / 4 KV heads with
RoPE and QK-norm, SCA with K = 16 heads, M = 2 points, expand 2 (H = 64),
readout expand 3, conv 4; tied embeddings, vocab 100300. SCA blocks have no
MLP (authors' code). The paper does not give the attention blocks' MLP width;
8/3·d = 2730 (the usual SwiGLU width) gives 371.8M parameters, the paper's 371M.

thesis-150m-* (thesis Table 3.1 and Table 4.1): d_model 768, 12 layers, 12
heads of 64, 12 KV heads, RoPE θ 1e4, vocab 32000, untied head. "MLP ratio 8"
counts both SwiGLU input halves (OLMo convention), so the hidden width is
8·768/2 = 3072; this reproduces the thesis' 137.8M non-embedding parameters of
the transformer. Hybrids put attention at the Table 4.1 layers:
50% → 1,3,5,7,9,11; 75% → 3,7,11; 83% → 5,11; 100% → none. Recurrent layers
(Gated DeltaNet, Mamba2 or Mamba) have the short conv and no positional embedding;
Gated DeltaNet and Mamba2 use the same 12 heads of 64, Mamba its own widths (d_inner = 2·d_model,
N = 16, dt_rank = d_model/16: the ``mamba`` preset, mixers/presets.py).

wiola-360m (Wiola paper, seed 002, §IV and §X; its Tables I, III and IV are missing from
the text): d_model 1024, 16 layers, vocab 32000, tied head, 4 KV heads of 64 as the text gives
them (eq. 38). Assumed: 16 query heads (H·d_h = d), θ₀ = 10⁴, SRPE k_s = 4, a_s = 0.1, f_s = 0.5,
DSFF d_A = d, d_B = 5d, ε = 1e-6. Every layer: WiolaRMSNorm → attention with SRPE, GQA, GCLA
(Λ = 2, φ₀ = −3) and the sigmoid output gate → WiolaRMSNorm → DSFF; ATM (τ = 0.92) in the middle
third, layers [L/3, 2L/3) = 5..9. The presets use the causal GCLA and ATM; ``wiola_config(...,
mode="as_written")`` builds the paper's versions (``wiola-tiny-as-written``).

*-tiny: the same layer patterns at d_model 64 for tests and CPU experiments.

st1-tiny (seed 003 Table 8 at d_model 64, byte vocabulary 257, sequences of 128): ST-1 as written
(circular steering and FOH, which see the future); st1-tiny-causal: the same with the causal filters;
st1-tiny-baseline: the same transformer without steering or FOH. SpectralKV (Table 8's "KV bins")
is not built: those layers are plain attention.
"""
from __future__ import annotations

from typing import Callable

import torch

from .config import HybridConfig

TABLE_4_1 = {50: [1, 3, 5, 7, 9, 11], 75: [3, 7, 11], 83: [5, 11], 100: []}
NAUTILE_MLP_HIDDEN = 2730


def _nautile(d: int, heads: int, kv: int, sca_heads: int, vocab: int, mlp: int, n_layers: int) -> HybridConfig:
    return HybridConfig(
        d_model=d, vocab_size=vocab, layers="sca,sca,attn", n_layers=n_layers,
        overrides={"attn": {"num_heads": heads, "head_dim": d // heads,
                            "attention": {"num_kv_heads": kv, "qk_norm": "rmsnorm"}},
                   "sca": {"num_heads": sca_heads, "conv_size": 4, "sca": {"expand": 2.0, "out_expand": 3, "maxlen": 1024}}},
        mlp_hidden=mlp, mlp_layers="attention", tie_embeddings=True)


def _thesis(d: int, heads: int, vocab: int, mlp: int, recurrent: str | None, pct: int) -> HybridConfig:
    if recurrent is None:
        return HybridConfig(d_model=d, vocab_size=vocab, layers="attn", n_layers=12, num_heads=heads,
                            mlp_hidden=mlp, tie_embeddings=False)
    return HybridConfig(d_model=d, vocab_size=vocab, layers=recurrent, n_layers=12,
                        attention_layers=TABLE_4_1[pct] or None, num_heads=heads, mlp_hidden=mlp,
                        tie_embeddings=False)


def _st1(mode: str | None, d: int = 64, seq_len: int = 128, vocab: int = 257) -> HybridConfig:
    """Seed 003 Table 8 at width d: 6 attention layers (4 heads, learned positions, no RoPE, MLP 4d); steering
    L0 low-pass 8, L1 low-pass 16, L4 high-pass 32, L5 high-pass 16 (bins of a seq_len rfft); L2 is FOH.
    mode None: the same transformer without steering and FOH (the paper's baseline)."""
    extensions = []
    if mode is not None:
        extensions = [{"kind": "steer", "layers": [i], "band": band, "cutoff": cutoff, "mode": mode, "seq_len": seq_len}
                      for i, band, cutoff in ((0, "lowpass", 8), (1, "lowpass", 16), (4, "highpass", 32),
                                              (5, "highpass", 16))]
        extensions.append({"kind": "foh", "layers": [2], "mode": mode, "seq_len": seq_len})
    return HybridConfig(d_model=d, vocab_size=vocab, layers="attn", n_layers=6, num_heads=4,
                        overrides={"attn": {"attention": {"rope": False}}}, mlp_hidden=4 * d, position_embedding="learned",
                        max_positions=seq_len, extensions=extensions)


WIOLA_SRPE = {"k_s": 4.0, "a_s": 0.1, "f_s": 0.5}  # assumed (Table I missing)


def wiola_config(d: int, n_layers: int, vocab: int, heads: int, kv: int, hidden_a: int, hidden_b: int, *,
                 mode: str = "causal", gcla_mode: str | None = None, atm_mode: str | None = None) -> HybridConfig:
    """The Wiola stack (module docstring): softmax attention layers with the extensions wiola_attention
    (SRPE, the output gate, GCLA in mode ``gcla_mode``, ATM in mode ``atm_mode`` on the middle third),
    dsff and wiola_norm; ``gcla_mode`` / ``atm_mode`` default to ``mode``."""
    lo, hi = n_layers // 3, 2 * n_layers // 3  # ATM: the middle third
    attention = {"kind": "wiola_attention", "srpe": WIOLA_SRPE, "output_gate": True,
                 "cross_layer": {"mode": gcla_mode or mode}}
    return HybridConfig(d_model=d, vocab_size=vocab, layers="attn", n_layers=n_layers, num_heads=heads,
                        overrides={"attn": {"attention": {"num_kv_heads": kv}}}, tie_embeddings=True, extensions=[
                            {**attention, "layers": [i for i in range(n_layers) if not lo <= i < hi]},
                            {**attention, "layers": list(range(lo, hi)),
                             "token_merge": {"mode": atm_mode or mode, "tau": 0.92}},
                            {"kind": "dsff", "hidden_a": hidden_a, "hidden_b": hidden_b},
                            {"kind": "wiola_norm"}])


def _registry() -> dict[str, Callable[[], HybridConfig]]:
    reg: dict[str, Callable[[], HybridConfig]] = {
        "nautile-370m": lambda: _nautile(1024, 16, 4, 16, 100300, NAUTILE_MLP_HIDDEN, 24),
        "nautile-tiny": lambda: _nautile(64, 4, 2, 4, 512, 170, 6),
        "thesis-150m-transformer": lambda: _thesis(768, 12, 32000, 3072, None, 0),
        "thesis-tiny-transformer": lambda: _thesis(64, 4, 512, 128, None, 0),
        "st1-tiny": lambda: _st1("circular"),
        "st1-tiny-causal": lambda: _st1("causal"),
        "st1-tiny-baseline": lambda: _st1(None),


        "wiola-360m": lambda: wiola_config(1024, 16, 32000, 16, 4, 1024, 5120),
        "wiola-tiny": lambda: wiola_config(64, 6, 512, 4, 2, 64, 256),
        "wiola-tiny-as-written": lambda: wiola_config(64, 6, 512, 4, 2, 64, 256, mode="as_written"),
    }
    for mixer in ("gdn", "mamba2", "mamba"):
        for pct in TABLE_4_1:
            reg[f"thesis-150m-{mixer}-{pct}"] = (lambda m=mixer, p=pct: _thesis(768, 12, 32000, 3072, m, p))
            reg[f"thesis-tiny-{mixer}-{pct}"] = (lambda m=mixer, p=pct: _thesis(64, 4, 512, 128, m, p))
    return reg


_PRESETS = _registry()


def list_model_presets() -> list[str]:
    return list(_PRESETS)


def get_model_preset(name: str) -> HybridConfig:
    """The HybridConfig registered under ``name``."""
    if name not in _PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {list(_PRESETS)}")
    return _PRESETS[name]().model_copy(update={"name": name})


def build_model(model: "str | HybridConfig | dict", dtype: torch.dtype | None = None):
    """An AssocMemForCausalLM from a preset name, a HybridConfig or its dict."""
    from .modeling import AssocMemConfig, AssocMemForCausalLM

    if isinstance(model, str):
        hc = get_model_preset(model)
    elif isinstance(model, HybridConfig):
        hc = model
    elif isinstance(model, dict):
        hc = HybridConfig.model_validate(model)
    else:
        raise TypeError(f"build_model takes a preset name, a HybridConfig or a dict, got {type(model).__name__}")
    net = AssocMemForCausalLM(AssocMemConfig(hybrid=hc))
    return net if dtype is None else net.to(dtype)
