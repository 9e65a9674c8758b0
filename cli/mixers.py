"""`assocmem derive SPEC` and `assocmem verify [NAME ...] [--json PATH]`.

    derive   print a spec's derived update, its lowering class, the forms it admits and the kernel
             backend it gets on CPU and on CUDA, and why
    verify   check every preset (or the named presets / spec files) against its derivation, and
             each preset layer against the published layer it names (--layers: only those); a spec's
             own ``reference`` (your hand-written rule) against the derivation and every form;
             --device cuda: every kernel backend on the GPU instead; exit 1 on any mismatch.
             Progress on stderr from the start: one line per pair, with k/n

SPEC / NAME is a preset name or alias (``assocmem.mixers.list_presets()``) or a MixerSpec
YAML/JSON file.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .types import positive_int, seed_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``derive`` and ``verify``."""
    p = sub.add_parser("derive", help="show the derived per-token update of a spec",
                       description="Print a spec's derived update, its class and the forms it admits.")
    p.add_argument("spec", help="a spec YAML/JSON file or a preset name")
    p.set_defaults(run=f"{__name__}:derive_main")

    p = sub.add_parser("verify", help="compare derived, hand-written, lowered and external implementations",
                       description="Check every preset (or the named presets / spec files) against its "
                                   "derivation; exit 1 on any mismatch.")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="preset names or spec YAML/JSON files (default: every preset, "
                        "assocmem.mixers.list_presets())")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the results as a JSON list")
    p.add_argument("--layers", action="store_true",
                   help="only the layer pairs: each preset layer against the published transformers layer it "
                        "names, weight for weight (default: the op pairs and the layer pairs)")
    p.add_argument("--no-large", dest="large", action="store_false",
                   help="skip the second, larger shape (T=1000, K=32, V=48; minutes, most of it the derived "
                        "recurrence and compiling the scan forms)")
    p.add_argument("--compiled", action="store_true",
                   help="also the compiled chunk / prefix_sum forms (lower(spec, form, compile=True)); each compiles "
                        "a few graphs, about a minute per preset on a small CPU")
    p.add_argument("--seq-len", type=positive_int, default=70, help="sequence length T of the random inputs (default 70)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the random inputs and weights, 0 to 2**32 - 1 (default 0)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: instead of the float64 pairs, every kernel backend (fla, compiled, torch) of each spec "
                        "on the GPU against the derivation in float32 and bf16, and each FLA-covered layer by backend "
                        "fla against backend torch (mixers/verify.py verify_backends: tolerances BACKEND_RTOL, "
                        "LAYER_RTOL)")
    p.set_defaults(run=f"{__name__}:verify_main")


def resolve_spec(name: str, command: str):
    """The spec of a preset name / alias or a YAML/JSON file; SystemExit naming ``command`` otherwise."""
    import yaml

    from assocmem.mixers import MixerSpec, get_preset

    if name.endswith((".yaml", ".yml", ".json")):
        if not Path(name).is_file():
            raise SystemExit(f"{command}: spec file {name!r} does not exist")
        try:
            return MixerSpec.from_yaml(Path(name))
        except (ValueError, yaml.YAMLError) as exc:  # pydantic's ValidationError is a ValueError
            raise SystemExit(f"{command}: {name} is not a valid MixerSpec: {exc}") from None
    try:
        return get_preset(name)
    except KeyError as exc:
        raise SystemExit(f"{command}: {exc.args[0]}") from None


def derive_main(args: argparse.Namespace) -> int:
    from assocmem.memories import derive
    from assocmem.mixers.lower import APPROXIMATE, available_forms
    from assocmem.mixers.presets import PUBLISHED_LAYERS, get_preset

    spec = resolve_spec(args.spec, "derive")
    step = derive(spec)
    forms = [f + (" (approximate, opt-in)" if f in APPROXIMATE else "") for f in available_forms(spec)]
    print(f"spec:      {spec.name or args.spec}")
    print(f"axes:      memory={spec.memory.kind}  bias={spec.bias.kind}  retention={spec.retention.kind}  "
          f"optimizer={spec.optimizer.kind}")
    print(f"update:    {step.describe()}")
    if spec.layer.normalize:
        print("read-out:  o_t = M_t φ(q_t) / (Z_t φ(q_t) + 1e-10),  Z_t = Z_{t-1} + φ(k_t)ᵀ  (normalised, thesis "
              "eqs. 2.31–2.36: Z_t is one more value column of the state)")
    print(f"class:     {step.cls}")
    print(f"forms:     {', '.join(forms)}  (auto = {available_forms(spec)[0]})")
    for i, line in enumerate(backend_lines(spec)):
        print(f"{'backend:' if i == 0 else '':10s} {line}")
    if spec.name in PUBLISHED_LAYERS and get_preset(spec.name) == spec:
        print(f"layer:     {PUBLISHED_LAYERS[spec.name]}")
    if spec.reference:
        print(f"reference: {spec.reference}  (your rule: `assocmem verify` holds it to the derivation and every form)")
    return 0


def backend_lines(spec) -> list[str]:
    """Which kernel backend ``auto`` gives ``spec`` on CPU and on CUDA (as it resolves with what is installed
    here, for bf16 training), and why (mixers/kernels.py)."""
    import warnings

    import torch

    from assocmem.mixers.lower import choose_backend

    lines = []
    for device in ("cpu", "cuda"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reason is printed here
            backend, why = choose_backend(spec, device=device, dtype=torch.bfloat16 if device == "cuda" else
                                          torch.float32)
        lines.append(f"{device:5s} -> {backend}: {why}")
    return lines


def verify_main(args: argparse.Namespace) -> int:
    from assocmem.training.progress import progress_line

    report = progress_line("verify")
    report(f"{', '.join(args.names) if args.names else 'every preset'}: loading torch and the forms ...")
    from assocmem.mixers.convert.cases import LAYER_CASES
    from assocmem.mixers.presets import list_presets
    from assocmem.mixers.verify import PairResult, print_table, verify
    from assocmem.mixers.verify_layers import verify_layers

    specs = [resolve_spec(n, "verify") for n in (args.names or list_presets())]
    for spec in specs:  # a reference that cannot be imported stops verify before any work
        _check_reference(spec)
    results: list[PairResult] = []
    if getattr(args, "device", "cpu") == "cuda":
        return _verify_cuda(specs, args)
    if not args.layers:
        for i, spec in enumerate(specs, 1):
            report(f"spec {i}/{len(specs)}: {spec.name or 'custom'}")
            results += verify(spec, T=args.seq_len, seed=args.seed, large=args.large, compiled=args.compiled,
                              report=report)
    ops = len(results)
    results += verify_layers(None if not args.names else [s.name for s in specs], seed=args.seed, report=report)
    if not results:
        raise SystemExit("verify --layers: no published layer is held to the named presets "
                         f"(layers exist for: {', '.join(sorted({c.preset for c in LAYER_CASES.values()}))})")
    print_table(results)
    print()
    names = {s.name for s in specs}
    for case in LAYER_CASES.values():
        if case.preset in names and case.unavailable():
            print(f"not run: layer vs transformers {case.name}: {case.unavailable()}")
    for spec in specs:
        for line in backend_lines(spec):
            print(f"{spec.name or 'custom':22s}  backend {line}")
    failed = [r for r in results if not r.passed]
    print(f"\n{len(results) - len(failed)} of {len(results)} pairs pass ({ops} op pairs, {len(results) - ops} layer pairs)")
    if args.json:
        if args.json.exists():
            print(f"(overwriting {args.json}: verify results are regenerated output)")
        args.json.write_text(json.dumps([r.as_json() for r in results], indent=2, default=float))
    return 1 if failed else 0


def _check_reference(spec) -> None:
    from assocmem.mixers.references import import_reference

    if spec.reference:
        try:
            import_reference(spec.reference)
        except (ImportError, TypeError) as exc:
            raise SystemExit(f"verify: spec {spec.name or 'custom'}: {exc}") from None


def _verify_cuda(specs: list, args: argparse.Namespace, env=None) -> int:
    """``verify --device cuda``: ``verify_backends`` of every spec (``env``: an injected FlaEnv, for tests)."""
    import torch

    from assocmem.mixers.verify import PairResult, print_table, verify_backends
    from assocmem.models.verify_backends import model_backend_pairs

    if env is None and not torch.cuda.is_available():
        raise SystemExit("verify --device cuda: no CUDA device here (torch.cuda.is_available() is False); run it on "
                         "a GPU machine, or verify without --device for the float64 pairs on CPU")
    device = "cuda" if env is None else env.device_type
    results: list[PairResult] = []
    for spec in specs:
        for line in backend_lines(spec):
            print(f"{spec.name or 'custom':22s}  {line}")
        results += verify_backends(spec, device, env=env, T=args.seq_len, seed=args.seed,
                                   **({} if env is None else {"backends": ("fla", "torch")}))
    for dtype in (torch.float32, torch.bfloat16):  # the whole model: every recurrent layer on FLA vs torch
        results += model_backend_pairs(device, dtype, env=env)
    print_table(results)
    failed = [r for r in results if not r.passed]
    print(f"\n{len(results) - len(failed)} of {len(results)} backend pairs pass on {device}")
    if args.json:
        args.json.write_text(json.dumps([r.as_json() for r in results], indent=2, default=float))
    return 1 if failed else 0
