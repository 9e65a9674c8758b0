"""The ST-1 leak experiment (seed 003 §7.3): the presets, the future control, the snap, one tiny run."""
import hashlib
import json
from argparse import Namespace

import pytest
import torch

from assocmem.models import build_model, output_cache
from assocmem.probes.causality import model_causality
from assocmem.probes.experiments.leak import future_control, leak_config, markdown_table, snap_epoch, summarize, text_file
from assocmem.cli import main as cli_main
from assocmem.training.config import config_from_dict
from assocmem.training.tasks import arrays_to_dataset
from assocmem.probes.experiments.textgen import procedural_text


def test_st1_as_written_leaks_and_the_causal_st1_does_not():
    ids = torch.randint(0, 257, (1, 128), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    written = model_causality(build_model("st1-tiny").double().eval(), ids, cuts=[0, 40, 100])
    assert not written.causal and written.first_leak == 0
    causal = model_causality(build_model("st1-tiny-causal").double().eval(), ids, cuts=[0, 40, 100], atol=1e-12)
    assert causal.causal


def test_causal_st1_decodes_like_its_full_forward():
    torch.manual_seed(0)
    model = build_model("st1-tiny-causal").double().eval()
    ids = torch.randint(0, 257, (2, 20))
    full = model(ids).logits
    out = model(ids[:, :12], use_cache=True)
    steps, cache = [out.logits], output_cache(out)
    for t in range(12, 20):
        out = model(ids[:, t:t + 1], cache=cache, use_cache=True)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-10, rtol=0)
    assert [type(b.mixer).__name__ for b in model.model.layers][2] == "FourierOnlyAttention"


def test_the_future_control_changes_nothing_for_a_causal_model_and_exposes_a_leak():
    blocks = torch.randint(0, 256, (6, 128), generator=torch.Generator().manual_seed(1)).numpy()
    data = arrays_to_dataset({"input_ids": blocks, "labels": blocks.copy()})
    torch.manual_seed(0)
    causal = build_model("st1-tiny-baseline").eval()
    tf, ctrl = future_control(causal, data, cuts_per_block=3, seed=0)
    assert tf == pytest.approx(ctrl, abs=1e-4) and tf > 7          # untrained: about log2(257) bits

    class Peek(torch.nn.Module):                                     # reads the next byte: a perfect leak
        config = causal.config

        def forward(self, input_ids):
            nxt = torch.roll(input_ids, -1, dims=1)
            return type("Out", (), {"logits": 30.0 * torch.nn.functional.one_hot(nxt, 257).float()})()

    tf, ctrl = future_control(Peek(), data, cuts_per_block=3, seed=0)
    assert tf < 1e-6 and ctrl > 5


def test_snap_is_a_30_percent_drop_within_ten_epochs():
    assert snap_epoch([(0, 8.0), (1, 7.0), (5, 6.0), (10, 5.5), (11, 4.0)]) == 10
    assert snap_epoch([(0, 8.0), (10, 6.0), (20, 4.5), (30, 3.5)]) is None
    assert snap_epoch([(0, 8.0), (1, 2.0)]) == 1


def test_the_text_is_a_given_file_or_the_repository_s_procedural_text(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(b"abc\n" * 300)
    path, source = text_file(Namespace(text=str(text), procedural_chars=51_200, text_seed=0), tmp_path)
    assert path == text.resolve() and source == {"kind": "file", "name": "t.txt", "bytes": 1200,
                                                 "sha256": hashlib.sha256(b"abc\n" * 300).hexdigest()}
    (tmp_path / "o").mkdir()
    path, source = text_file(Namespace(text=None, procedural_chars=5000, text_seed=3), tmp_path / "o")
    assert path.read_text() == procedural_text(5000, 3) and source["kind"] == "procedural" and source["seed"] == 3
    with pytest.raises(ValueError, match="procedural-chars must be >= 1024"):
        text_file(Namespace(text=None, procedural_chars=100, text_seed=0), tmp_path)


def test_configs_and_a_tiny_run_end_to_end(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(120)))
    cfg = config_from_dict(leak_config("st1_causal", 0, text, 1, tmp_path / "x"))
    assert cfg.train.grad_transforms[0].param == "model.embed_positions.weight" and cfg.model.preset == "st1-tiny-causal"
    assert config_from_dict(leak_config("baseline", 0, text, 1, tmp_path / "y")).train.grad_transforms == []
    out, result = tmp_path / "leak", tmp_path / "leak.json"
    assert cli_main(["experiment", "leak", "--procedural-chars", "6000", "--seeds", "0", "--epochs", "1",
                     "--cuts", "1", "--jobs", "1", "--out", str(out), "--result", str(result)]) == 0
    assert (out / "text.txt").read_text() == procedural_text(6000, 0)
    assert json.loads(result.read_text())["extra"]["text"]["kind"] == "procedural"
    runs = json.loads((out / "leak.json").read_text())["runs"]
    assert [r["model"] for r in runs] == ["baseline", "st1_as_written", "st1_causal"]
    assert all([e for e, _ in r["bpc_curve"]] == [0, 1] for r in runs)
    assert "st1_causal/final_bpc_control" in json.loads(result.read_text())["per_seed"]["0"]
    assert "| st1_as_written |" in markdown_table(summarize(runs))
