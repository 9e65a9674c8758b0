"""`assocmem derive SPEC`: print a spec's derived update, its class and the forms it admits."""
from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("derive", help="show the derived per-token update of a spec",
                       description=__doc__)
    p.add_argument("spec", help="a spec YAML/JSON file or a preset name")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from assocmem.mixers import MixerSpec, get_preset
    from assocmem.mixers.lower import APPROXIMATE, available_forms

    from .derive import derive

    src = args.spec
    if Path(src).suffix in (".yaml", ".yml", ".json"):
        if not Path(src).exists():
            raise SystemExit(f"derive: spec file {src!r} does not exist")
        spec = MixerSpec.from_yaml(Path(src))
    else:
        try:
            spec = get_preset(src)
        except KeyError as exc:
            raise SystemExit(f"derive: {exc.args[0]}") from None
    step = derive(spec)
    forms = [f + (" (approximate, opt-in)" if f in APPROXIMATE else "") for f in available_forms(spec)]
    print(f"spec:      {spec.name or src}")
    print(f"axes:      memory={spec.memory.kind}  bias={spec.bias.kind}  retention={spec.retention.kind}  "
          f"optimizer={spec.optimizer.kind}")
    print(f"update:    {step.describe()}")
    print(f"class:     {step.cls}")
    print(f"forms:     {', '.join(forms)}  (auto = {available_forms(spec)[0]})")
    return 0
