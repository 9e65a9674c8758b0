"""probe niah: a lookup model scores 1.0 everywhere, a context-blind model scores chance, a
transformers Llama runs unchanged (with lengths beyond its position range flagged), SCA refuses
lengths beyond sca_maxlen, and the CLI writes JSON + PNG for a trained run."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

from assocmem.models import HybridConfig, build_model
from assocmem.probes.niah import TextNeedle, niah_grid, retrieved, save_niah_figure
from assocmem.cli import main as cli_main
from assocmem.training.data import ByteTokenizer
from assocmem.training.verifiable import Needle


pytestmark = pytest.mark.usefixtures("one_thread")


class LookupModel(torch.nn.Module):
    """Predicts the token that followed the previous occurrence of the current token (an exact
    associative lookup); uniform when the token has not occurred before."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.config = vocab, SimpleNamespace(model_type="lookup", vocab_size=vocab)
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask=None):
        B, T = input_ids.shape
        logits = torch.zeros(B, T, self.vocab)
        for b in range(B):
            last = {}
            row = input_ids[b].tolist()
            for t, tok in enumerate(row):
                if tok in last:
                    logits[b, t, row[last[tok] + 1]] = 1.0
                last[tok] = t
        return SimpleNamespace(logits=logits)


class UnigramModel(LookupModel):
    """The same logits at every position: the arg-max is always ``favourite``."""

    def __init__(self, vocab, favourite):
        super().__init__(vocab)
        self.favourite = favourite

    def forward(self, input_ids, attention_mask=None):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        logits[..., self.favourite] = 1.0
        return SimpleNamespace(logits=logits)


TASK = Needle(num_needles=3, num_filler=20, num_keys=8, num_values=6)
LENGTHS, DEPTHS = [16, 40, 64], [0.0, 0.5, 1.0]


def test_needle_cases_are_placed_at_their_depth():
    rng = np.random.default_rng(0)
    for depth in DEPTHS:
        for _ in range(20):
            p = TASK.case(rng, length=40, depth=depth)
            key = p.prompt[-1]
            slots = 40 - 2 - 6
            at = p.info["needle_at"]
            fillers_before = sum(1 for t in p.prompt[:at] if t < 20)
            assert len(p.prompt) == 40 and p.prompt[-2] == TASK.query_id and p.prompt[at + 1] == p.reference[0]
            assert fillers_before == round(depth * slots) and list(p.prompt).count(key) == 2
    with pytest.raises(ValueError, match="length=7 cannot hold 3 needles"):
        TASK.case(rng, length=7, depth=0.5)


def test_a_lookup_model_scores_one_everywhere():
    heard = []
    report = niah_grid(LookupModel(TASK.vocab_size), TASK, lengths=LENGTHS, depths=DEPTHS, trials=12,
                       report=heard.append)
    cells = len(LENGTHS) * len(DEPTHS)  # progress: one line before each cell
    assert heard[0] == f"cell 1/{cells}: depth {100 * DEPTHS[0]:.0f}%, length {LENGTHS[0]} ..." and len(heard) == cells
    assert report["accuracy"] == [[1.0] * 3] * 3 and report["chance"] == pytest.approx(1 / 6)


def test_a_context_blind_model_scores_chance_exactly():
    favourite = TASK.num_filler + TASK.num_keys + 2                    # one of the value ids
    report = niah_grid(UnigramModel(TASK.vocab_size, favourite), TASK, lengths=LENGTHS, depths=DEPTHS, trials=200,
                       seed=5)
    for i, depth in enumerate(DEPTHS):
        for j, length in enumerate(LENGTHS):
            rng = np.random.default_rng([5, i, j])
            answers = [TASK.case(rng, length=length, depth=depth).reference[0] for _ in range(200)]
            assert report["accuracy"][i][j] == np.mean([a == favourite for a in answers])
    assert abs(np.mean(report["accuracy"]) - 1 / 6) < 0.05             # 1800 cases around chance


def test_a_transformers_llama_runs_unchanged_and_long_lengths_are_flagged(tmp_path):
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=TASK.vocab_size, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=48)).eval()
    report = niah_grid(llama, TASK, lengths=LENGTHS, depths=DEPTHS, trials=4, train_length=40)
    assert set(report["flags"]) == {"64"} and "max_position_embeddings=48" in report["flags"]["64"][0]
    cases = [TASK.case(np.random.default_rng(1), length=16, depth=0.5)]
    with torch.no_grad():
        guess = int(llama(input_ids=torch.tensor([cases[0].prompt])).logits[0, -1].argmax())
    assert retrieved(llama, cases)[0] == (guess == cases[0].reference[0])
    assert report["mean_within_train_length"] == pytest.approx(np.mean(np.array(report["accuracy"])[:, :2]))
    save_niah_figure(report, tmp_path / "niah.png")
    assert (tmp_path / "niah.png").stat().st_size > 1000


def test_sca_refuses_lengths_beyond_its_maxlen():
    sca = build_model(HybridConfig(d_model=32, vocab_size=TASK.vocab_size, layers="sca,attn", num_heads=2,
                                   overrides={"sca": {"sca": {"maxlen": 48}}}))
    with pytest.raises(ValueError, match="context 64 needs 64 tokens: SCA layers are defined up to sca.maxlen=48"):
        niah_grid(sca, TASK, lengths=LENGTHS, depths=DEPTHS, trials=2)


def test_a_text_haystack(tmp_path):
    (tmp_path / "hay.txt").write_text("The grass is green and the sky is blue. " * 5)
    tok = ByteTokenizer()
    source = TextNeedle(tmp_path / "hay.txt", tok)
    p = source.case(np.random.default_rng(0), length=300, depth=0.5)
    text = tok.decode(p.prompt)
    value = p.info["answer"]
    assert len(p.prompt) == 300 and tok.decode(p.reference) == f" {value}"
    assert f" is {value}. " in text and text.endswith(" is")
    key = text.rsplit("secret code of ", 1)[1].split(" ")[0]
    needle = len(TextNeedle.NEEDLE.format(key=key, value=value))
    query = len(TextNeedle.QUERY.format(key=key))
    assert text.index(" The secret code") == round(0.5 * (300 - needle - query))


def test_cli_on_a_run_trained_on_needles(tmp_path):
    data = {"kind": "needle", "seq_len": 32, "num_needles": 2, "num_filler": 16, "num_keys": 8, "num_values": 8,
            "num_train": 32, "num_eval": 8}
    cfg = {"name": "hay", "output_dir": str(tmp_path / "runs"), "data": data,
           "model": {"hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}},
           "train": {"steps": 2, "batch_size": 8, "progress": False, "threads": 1}}
    (tmp_path / "hay.yaml").write_text(yaml.safe_dump(cfg))
    assert cli_main(["train", str(tmp_path / "hay.yaml")]) == 0
    out = tmp_path / "niah"
    assert cli_main(["probe", "niah", str(tmp_path / "runs" / "hay"), "--out", str(out), "--lengths", "16", "32",
                     "64", "--depths", "0", "100", "--trials", "4"]) == 0
    report = json.loads((out / "niah.json").read_text())
    assert report["train_length"] == 32 and report["chance"] == 1 / 8 and np.shape(report["accuracy"]) == (2, 3)
    assert (out / "niah.png").is_file()
    assert cli_main(["probe", "niah", str(tmp_path / "runs" / "hay"), "--out", str(tmp_path / "n2"),
                     "--depths", "150"]) == 2
