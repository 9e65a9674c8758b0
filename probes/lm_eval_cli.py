"""lm-evaluation-harness on assocmem models: ``assocmem eval-harness RUN [lm-eval arguments]``.

lm-eval's ``hf`` backend loads a model with ``AutoModelForCausalLM.from_pretrained``, which knows
``model_type: assocmem`` once ``assocmem.models`` is imported; lm-eval's own command cannot import
us. This wrapper imports it, then hands the command line to lm-eval (the parser: cli/eval_harness.py):

    assocmem eval-harness runs/NAME --tasks TASK [--model_args tokenizer=FOLDER,dtype=float32] [...]

is ``lm_eval run --model hf --model_args pretrained=runs/NAME/final,backend=causal,... --tasks TASK``.
RUN is a run folder (its final/), a ``save_pretrained`` folder or a Hugging Face Hub id
(training/hub.py; offline, an id that is not cached is refused naming it). The tokenizer is the one
saved beside the model (a run on text data saves its own in final/); ``--model_args`` adds lm-eval
model arguments. The older spelling ``python -m assocmem.probes.lm_eval_cli run --model hf ...``
passes every argument through unchanged. In Python: ``import assocmem`` then
``lm_eval.simple_evaluate(model="hf", model_args=...)``. Install with ``pip install 'assocmem[eval]'``.
"""
from __future__ import annotations

import sys
from pathlib import Path


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def harness_argv(run: str, rest: list[str], local_tasks: Path | None = None) -> list[str]:
    """lm-eval's command line for the model at ``run`` plus the user's lm-eval arguments ``rest``.

    ``--model`` and a ``pretrained=`` or ``trust_remote_code=`` model argument are refused (this command sets
    them: no code from a model folder runs); a given ``--model_args`` (or ``--model_args=...``) is appended to
    ``pretrained=FOLDER,backend=causal,trust_remote_code=False``. A model without a tokenizer (a run on a
    synthetic task) is refused unless ``--model_args tokenizer=...`` names one. ``local_tasks``: a folder for
    the tasks assocmem ships (probes/lm_eval_tasks.py); when ``--tasks`` asks for one and no
    ``--include_path`` is given, they are written there and it is included.
    """
    from assocmem.models.hf_load import refuse_custom_code
    from assocmem.training.model_factory import pretrained_folder

    from .lm_eval_tasks import LOCAL_TASKS, write_local_tasks

    folder = pretrained_folder(run)
    refuse_custom_code(folder)
    extra, passed = [], []
    it = iter(rest)
    for arg in it:
        if arg == "--model" or arg.startswith("--model="):
            raise ValueError("--model is set by eval-harness (hf); leave it out")
        if arg in ("--model_args", "--model-args"):
            value = next(it, None)
            if value is None:
                raise ValueError(f"{arg} needs a value, e.g. {arg} dtype=float32")
            extra.append(value)
        elif arg.startswith(("--model_args=", "--model-args=")):
            extra.append(arg.split("=", 1)[1])
        else:
            passed.append(arg)
    keys = [item.split("=", 1)[0].strip() for value in extra for item in value.split(",") if item]
    clash = sorted({"pretrained", "backend", "trust_remote_code"} & set(keys))
    if clash:
        raise ValueError(f"--model_args {clash} are set by eval-harness (the model folder, backend=causal, "
                         f"trust_remote_code=False); leave them out")
    if "tokenizer" not in keys and not any((Path(folder) / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(f"{run} has no tokenizer ({folder} holds none): it was trained on the token ids of a "
                         f"synthetic task, not on text, and lm-eval reads text. Evaluate a model with a tokenizer "
                         f"(a run on data.kind: files saves one in final/), pass --model_args tokenizer=FOLDER "
                         f"whose ids match the model's, or use `assocmem eval {run}` for the run's own task")
    tasks = next((v for a, v in zip(passed, passed[1:]) if a == "--tasks"), "")
    tasks += ",".join(a.split("=", 1)[1] for a in passed if a.startswith("--tasks="))
    if (local_tasks is not None and set(tasks.split(",")) & set(LOCAL_TASKS)
            and not any(a == "--include_path" or a.startswith("--include_path=") for a in passed)):
        passed += ["--include_path", str(write_local_tasks(local_tasks))]
    model_args = ",".join([f"pretrained={folder}", "backend=causal", "trust_remote_code=False", *extra])
    return ["run", "--model", "hf", "--model_args", model_args, *passed]


def run_lm_eval(argv: list[str]) -> None:
    """Run lm-eval's command line ``argv`` in this process (assocmem's Auto classes registered)."""
    import assocmem.models  # noqa: F401  (registers model_type "assocmem" with transformers' Auto classes)

    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError as err:
        raise SystemExit(f"lm-evaluation-harness is not installed ({err}); pip install 'assocmem[eval]'") from None
    sys.argv = ["lm_eval", *argv]
    cli_evaluate()


def main(argv: list[str] | None = None) -> None:
    """``python -m assocmem.probes.lm_eval_cli ARGS``: lm-eval's command line, unchanged."""
    run_lm_eval(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
