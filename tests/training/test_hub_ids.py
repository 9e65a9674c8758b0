"""Hugging Face Hub ids wherever a folder is accepted (training/hub.py): a cached snapshot loads
offline; an id that is not cached, offline, is refused naming the id and that the machine is offline;
and ``assocmem eval-harness RUN`` builds lm-eval's command line."""
import os
import subprocess
import sys

import pytest
import torch

import assocmem  # noqa: F401
from assocmem.models import HybridConfig, build_model
from assocmem.probes import io as probe_io
from assocmem.probes.lm_eval_cli import harness_argv
from assocmem.training.config import ModelConfig
from assocmem.training.hub import HubUnavailableError, is_hub_id
from assocmem.training.model_factory import build_from_config, load_pretrained
from assocmem.training.text_files import byte_tokenizer_fast, load_tokenizer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OFFLINE = r"'nobody/missing' is not a local folder, so it was read as a Hugging Face Hub id, but it is not " \
          r"\(completely\) in the local cache and this machine is offline \(HF_HUB_OFFLINE=1\)"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline HF cache holding one model repo, tiny/lm (what snapshot_download leaves on disk)."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--tiny--lm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    torch.manual_seed(0)
    model = build_model(HybridConfig(d_model=32, layers="gdn,attn", num_heads=2, mlp_ratio=0, vocab_size=257)).eval()
    model.save_pretrained(repo / "snapshots" / COMMIT)
    byte_tokenizer_fast().save_pretrained(repo / "snapshots" / COMMIT)
    return model


def test_hub_ids_are_told_from_paths():
    assert is_hub_id("gpt2") and is_hub_id("owner/name-1.5") and is_hub_id("runs")
    assert not is_hub_id("runs/a/final") and not is_hub_id("/abs/path") and not is_hub_id("a b")


def test_a_cached_hub_model_loads_offline_wherever_a_folder_does(hub_cache):
    ids = torch.tensor([list(b"hello there")])
    with torch.no_grad():
        want = hub_cache(ids).logits
        for loaded in (load_pretrained("tiny/lm"), probe_io.load_model("tiny/lm")[0],
                       build_from_config(ModelConfig(init_from="tiny/lm"), vocab_size=257).eval()):
            torch.testing.assert_close(loaded(ids).logits, want, atol=0, rtol=0)
    assert load_tokenizer("tiny/lm").encode("héllo", add_special_tokens=False) == list("héllo".encode())


def test_an_uncached_hub_id_offline_names_the_id_and_the_reason(hub_cache, tmp_path):
    for load in (load_pretrained, load_tokenizer, probe_io.load_model, lambda ref: harness_argv(ref, ["--tasks", "x"]),
                 lambda ref: build_from_config(ModelConfig(init_from=ref), vocab_size=9)):
        with pytest.raises(HubUnavailableError, match=OFFLINE):
            load("nobody/missing")
    with pytest.raises(FileNotFoundError, match="not a saved model"):
        load_pretrained(str(tmp_path / "no" / "such" / "folder"))


def test_the_command_line_offline(tmp_path):
    """HF_HUB_OFFLINE=1 in the environment, an empty HF cache: exit 2 and the message, no traceback."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    for command in (["eval-harness", "nobody/missing", "--tasks", "hellaswag"],
                    ["probe", "graph-tracing", "nobody/missing", "--out", str(tmp_path / "o")]):
        done = subprocess.run([sys.executable, "-m", "assocmem.cli", *command], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert "'nobody/missing' is not a local folder" in done.stderr, done.stderr
        assert "this machine is offline (HF_HUB_OFFLINE=1)" in done.stderr


def test_eval_harness_builds_lm_evals_command_line(tmp_path):
    run = tmp_path / "run"
    build_model(HybridConfig(d_model=16, layers="gdn", mlp_ratio=0, vocab_size=257)).save_pretrained(run / "final")
    final = run / "final"
    with pytest.raises(ValueError, match=r"has no tokenizer .*: it was trained on the token ids of a synthetic task"):
        harness_argv(str(run), ["--tasks", "t"])
    assert harness_argv(str(run), ["--model_args", "tokenizer=tok", "--tasks", "t"])[4].endswith("tokenizer=tok")
    from assocmem.training.text_files import byte_tokenizer_fast

    byte_tokenizer_fast().save_pretrained(final)
    assert harness_argv(str(run), ["--tasks", "t", "--limit", "3"]) == [
        "run", "--model", "hf", "--model_args", f"pretrained={final},backend=causal,trust_remote_code=False", "--tasks", "t", "--limit", "3"]
    assert harness_argv(str(final), ["--model_args", "dtype=float32,tokenizer=tok", "--tasks", "t"]) == [
        "run", "--model", "hf", "--model_args", f"pretrained={final},backend=causal,trust_remote_code=False,dtype=float32,tokenizer=tok",
        "--tasks", "t"]
    joined = harness_argv(str(run), ["--model-args=dtype=float32"])[4]
    assert joined == f"pretrained={final},backend=causal,trust_remote_code=False,dtype=float32"
    with pytest.raises(ValueError, match="--model is set by eval-harness"):
        harness_argv(str(run), ["--model", "vllm"])
    with pytest.raises(ValueError, match=r"--model_args \['pretrained'\] are set by eval-harness"):
        harness_argv(str(run), ["--model_args", "pretrained=other"])
    with pytest.raises(FileNotFoundError, match="not a saved model"):
        harness_argv(str(tmp_path), [])
    # a task assocmem ships: written to the given folder and included (unless --include_path is given)
    argv = harness_argv(str(run), ["--tasks", "assocmem_copy", "--limit", "4"], local_tasks=tmp_path / "tasks")
    assert argv[-2:] == ["--include_path", str(tmp_path / "tasks")]
    assert (tmp_path / "tasks" / "assocmem_copy.yaml").is_file() and (tmp_path / "tasks" / "assocmem_copy.jsonl").is_file()
    mine = ["--tasks", "assocmem_copy", "--include_path", "mine"]
    assert harness_argv(str(run), mine, local_tasks=tmp_path / "t2")[-4:] == mine
    assert "--include_path" not in harness_argv(str(run), ["--tasks", "hellaswag"], local_tasks=tmp_path / "t3")
