"""lm-evaluation-harness on assocmem models: ``python -m assocmem.probes.lm_eval_cli`` + lm_eval's own arguments.

lm-eval's ``hf`` backend loads a model with ``AutoModelForCausalLM.from_pretrained``, which knows
``model_type: assocmem`` once ``assocmem.models`` is imported. This wrapper imports it, then hands
the command line to lm-eval unchanged, so a run folder evaluates as

    python -m assocmem.probes.lm_eval_cli run --model hf \\
        --model_args pretrained=runs/NAME/final,tokenizer=TOKENIZER_FOLDER,backend=causal --tasks TASK

(``backend=causal`` spares lm-eval's guess; a run trained with ``tokenizer: bytes`` has no HF
tokenizer: give one that matches its ids). In Python: ``import assocmem.models`` then
``lm_eval.simple_evaluate(model="hf", model_args=...)``. Install with ``pip install 'assocmem[eval]'``.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    import assocmem.models  # noqa: F401  (registers model_type "assocmem" with transformers' Auto classes)

    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError as err:
        raise SystemExit(f"lm-evaluation-harness is not installed ({err}); pip install 'assocmem[eval]'") from None
    sys.argv = ["lm_eval", *(sys.argv[1:] if argv is None else argv)]
    cli_evaluate()


if __name__ == "__main__":
    main()
