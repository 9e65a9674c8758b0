"""lm-evaluation-harness runs a local task end to end on an assocmem model (the [eval] extra):
its per-choice log-likelihoods equal a teacher-forced forward of ours, and so does its accuracy."""
import json

import pytest
import torch
import torch.nn.functional as F

lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (make setup-eval, or pip install 'assocmem[eval]')")

from assocmem.models import HybridConfig, build_model  # noqa: E402
from assocmem.probes.lm_eval_cli import main as lm_eval_main  # noqa: E402

WORDS = ["[UNK]", "[EOS]", "what", "is", "two", "plus", "three", "four", "five", "six", "seven", "?"]
DOCS = [{"question": "what is two plus two ?", "choices": ["four", "five", "six"], "answer": 0},
        {"question": "what is three plus three ?", "choices": ["five", "six", "seven"], "answer": 1},
        {"question": "what is two plus three ?", "choices": ["four", "five"], "answer": 1},
        {"question": "what is three plus four ?", "choices": ["six", "seven"], "answer": 1}]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="[EOS]")


def _task(folder):
    folder.mkdir()
    (folder / "data.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (folder / "tiny.yaml").write_text(
        "task: assocmem_tiny\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'data.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n")


def _loglikelihood(model, tok, context, continuation):
    ctx = tok.encode(context, add_special_tokens=False)
    cont = tok.encode(continuation, add_special_tokens=False)
    with torch.no_grad():
        logp = F.log_softmax(model(input_ids=torch.tensor([ctx + cont])).logits[0].double(), dim=-1)
    return sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont))


def _saved(tmp_path):
    torch.manual_seed(0)
    model = build_model(HybridConfig(d_model=32, vocab_size=len(WORDS), layers="gdn,attn", num_heads=2, mlp_ratio=2))
    tok = _tokenizer()
    model.save_pretrained(tmp_path / "final")
    tok.save_pretrained(tmp_path / "final")
    _task(tmp_path / "tasks")
    return model.eval(), tok


def _check_against_ours(model, tok, out):
    """lm-eval's per-choice log-likelihoods equal a teacher-forced forward of ours, and so does its accuracy."""
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    samples = [json.loads(line) for line in next(out.rglob("samples_assocmem_tiny_*.jsonl")).open()]
    hits = []
    for sample in sorted(samples, key=lambda s: s["doc_id"]):
        doc = DOCS[sample["doc_id"]]
        ours = [_loglikelihood(model, tok, doc["question"], " " + c) for c in doc["choices"]]
        theirs = [float(r[0][0]) for r in sample["resps"]]
        assert theirs == pytest.approx(ours, abs=2e-5)                     # float32 forward in lm-eval
        hits.append(max(range(len(ours)), key=ours.__getitem__) == doc["answer"])
    assert len(hits) == len(DOCS)
    assert results["results"]["assocmem_tiny"]["acc,none"] == pytest.approx(sum(hits) / len(hits), abs=1e-12)


def test_a_local_task_end_to_end_through_the_wrapper(tmp_path):
    model, tok = _saved(tmp_path)
    lm_eval_main(["run", "--model", "hf", "--model_args", f"pretrained={tmp_path / 'final'},backend=causal",
                  "--tasks", "assocmem_tiny", "--include_path", str(tmp_path / "tasks"), "--device", "cpu",
                  "--batch_size", "2", "--output_path", str(tmp_path / "out"), "--log_samples"])
    _check_against_ours(model, tok, tmp_path / "out")


def test_assocmem_eval_harness_on_a_run_folder(tmp_path):
    from assocmem.cli import main as cli_main

    model, tok = _saved(tmp_path)  # tmp_path is laid out as a run folder: its model and tokenizer in final/
    assert cli_main(["eval-harness", str(tmp_path), "--tasks", "assocmem_tiny", "--include_path",
                     str(tmp_path / "tasks"), "--device", "cpu", "--batch_size", "2", "--output_path",
                     str(tmp_path / "out"), "--log_samples"]) == 0
    _check_against_ours(model, tok, tmp_path / "out")


def _readme_eval_harness_line() -> list[str]:
    """The README's `assocmem eval-harness ...` line, its arguments as written (comment stripped)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("assocmem eval-harness "))
    return line.split("#", 1)[0].split()[1:]


def test_the_readmes_eval_harness_line_runs_on_the_quick_start_model(tmp_path, monkeypatch):
    """The quick start saves a byte-level tiny-hybrid with its tokenizer; the README's eval-harness line runs
    the local task assocmem ships on it offline, and lm-eval's per-choice log-likelihoods equal ours."""
    from assocmem.cli import main as cli_main
    from assocmem.probes.lm_eval_tasks import copy_docs
    from assocmem.training.text_files import byte_tokenizer_fast

    argv = _readme_eval_harness_line()
    assert argv[:4] == ["eval-harness", "tiny-hybrid", "--tasks", "assocmem_copy"], argv
    torch.manual_seed(0)
    model = build_model(HybridConfig(d_model=64, layers="gdn,gdn,attn", num_heads=4, vocab_size=257)).eval()
    monkeypatch.chdir(tmp_path)
    model.save_pretrained("tiny-hybrid")
    tok = byte_tokenizer_fast()
    tok.save_pretrained("tiny-hybrid")
    out = tmp_path / "out"
    assert cli_main([*argv, "--limit", "6", "--device", "cpu", "--batch_size", "2", "--output_path", str(out),
                     "--log_samples"]) == 0
    samples = [json.loads(line) for line in next(out.rglob("samples_assocmem_copy_*.jsonl")).open()]
    docs = copy_docs()
    assert len(samples) == 6
    for sample in samples:
        doc = docs[sample["doc_id"]]
        ours = [_loglikelihood(model, tok, doc["context"], " " + c) for c in doc["choices"]]
        assert [float(r[0][0]) for r in sample["resps"]] == pytest.approx(ours, abs=2e-5)
