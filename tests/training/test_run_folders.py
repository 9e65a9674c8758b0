"""Run folders that feed the next tool: final/ holds the tokenizer and a real EOS (transformers'
pipeline runs on it), every step checkpoint loads with from_pretrained, eval.json is kept."""
import json

import pytest
import torch

import assocmem  # noqa: F401  (registers model_type "assocmem" with the Auto classes)
from assocmem.training import checkpoint as ckpt
from assocmem.training.config import load_config
from assocmem.training.loop import train
from assocmem.training.model_factory import build_from_config
from assocmem.training.text_files import ByteTokenizer, byte_tokenizer_fast

TEXTS = ["plain ascii", "héllo wörld ✓ 𝔘𝔫𝔦", "\x00\x01\t\n\r \x7f\u00ad\u00a0",
         "<|endoftext|> is text here", "  two leading spaces", ""]
HYBRID = {"hf_config": None, "hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}}


def _corpus(tmp_path):
    words = "the cat sat on a mat while a dog ran far away".split()
    docs = [" ".join(words[(7 * i + j) % len(words)] for j in range(25)) for i in range(40)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(docs))
    return path


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A tiny hybrid trained 4 steps on byte-level text, a checkpoint every 2 steps."""
    tmp_path = tmp_path_factory.mktemp("text_run")
    from training_helpers import BASE, merge
    import yaml

    data = {"kind": "files", "train_files": [str(_corpus(tmp_path))], "seq_len": 32, "eval_fraction": 0.1,
            "sample_by": "paragraph"}
    cfg = merge(BASE, {"output_dir": str(tmp_path / "runs"), "model": HYBRID, "data": data,
                       "train": {"steps": 4, "checkpoint_every": 2, "keep_last": 5}})
    cfg["data"] = data  # replace the MQAR section, not merge into it
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump(cfg))
    train(load_config(path))
    return tmp_path / "runs" / "text"


def test_the_byte_tokenizer_as_a_fast_tokenizer_gives_the_same_ids():
    fast, ours = byte_tokenizer_fast(), ByteTokenizer()
    for text in TEXTS:
        ids = fast.encode(text, add_special_tokens=False)
        assert ids == ours.encode(text) == list(text.encode("utf-8")), text
        assert fast.decode(ids) == ours.decode(ids) == text
    assert (fast.eos_token, fast.eos_token_id, len(fast)) == ("<|endoftext|>", 256, 257)
    assert fast.decode([104, 105, 256], skip_special_tokens=True) == "hi"


def test_final_holds_the_training_tokenizer_and_its_eos(text_run):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    final = text_run / "final"
    tok = AutoTokenizer.from_pretrained(final)
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=False) == list(text.encode("utf-8"))
    assert tok.eos_token_id == 256
    assert AutoConfig.from_pretrained(final).eos_token_id == 256
    generation = GenerationConfig.from_pretrained(final)
    assert (generation.eos_token_id, generation.pad_token_id) == (256, 256)


def test_a_text_generation_pipeline_runs_on_the_final_folder(text_run):
    from transformers import AutoModelForCausalLM, pipeline

    final = text_run / "final"
    generator = pipeline("text-generation", model=str(final))
    out = generator("the cat", max_new_tokens=6, do_sample=False, return_full_text=False)[0]["generated_text"]
    model = AutoModelForCausalLM.from_pretrained(final).eval()  # the same greedy decode, by hand
    ids = torch.tensor([list(b"the cat")])
    with torch.no_grad():
        for _ in range(6):
            nxt = model(ids).logits[0, -1].argmax()
            if int(nxt) == 256:
                break
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    assert out == ByteTokenizer().decode(ids[0, 7:].tolist())
    assert len(out.encode("utf-8")) >= 1


def test_every_step_checkpoint_loads_with_from_pretrained(text_run):
    from transformers import AutoModelForCausalLM

    steps = ckpt.list_checkpoints(text_run)
    assert [ckpt.step_of(p) for p in steps] == [2, 4]
    cfg = load_config(text_run / "config.yaml")
    ids = torch.tensor([list(b"the dog ran"), list(b"a mat while")])
    for path in steps:
        assert ckpt.checkpoint_problem(path) is None
        assert set(json.loads((path / ckpt.MANIFEST_FILE).read_text())["files"]) == {
            ckpt.WEIGHTS_FILE, ckpt.STATE_FILE, ckpt.CONFIG_FILE}
        loaded = AutoModelForCausalLM.from_pretrained(path).eval()
        assert loaded.config.eos_token_id == 256
        torch.manual_seed(1)
        rebuilt = build_from_config(cfg.model, vocab_size=257)
        ckpt.load_weights(path, rebuilt)
        with torch.no_grad():
            torch.testing.assert_close(loaded(ids).logits, rebuilt.eval()(ids).logits, atol=0, rtol=0)
    final = AutoModelForCausalLM.from_pretrained(text_run / "final").eval()
    with torch.no_grad():  # the last checkpoint is the final model
        torch.testing.assert_close(final(ids).logits, loaded(ids).logits, atol=0, rtol=0)


def test_an_edited_config_json_fails_the_checksum(text_run, tmp_path):
    import shutil

    copy = tmp_path / "step_00000002"
    shutil.copytree(text_run / "checkpoints" / "step_00000002", copy)
    text = (copy / ckpt.CONFIG_FILE).read_text()
    assert '"eos_token_id": 256' in text
    (copy / ckpt.CONFIG_FILE).write_text(text.replace('"eos_token_id": 256', '"eos_token_id": 255'))  # same size
    assert "config.json does not match its SHA-256" in ckpt.checkpoint_problem(copy)
    (copy / ckpt.CONFIG_FILE).unlink()
    assert ckpt.checkpoint_problem(copy) == f"{copy / ckpt.CONFIG_FILE} is missing"
    ckpt.seal_checkpoint(copy)  # a checkpoint without config.json (an older one) still verifies
    assert ckpt.checkpoint_problem(copy) is None


def test_a_local_hf_tokenizer_is_saved_with_the_model(tmp_path):
    import yaml
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast
    from training_helpers import BASE, TINY_LLAMA, merge

    corpus = _corpus(tmp_path)
    core = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.train([str(corpus)], trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="[EOS]").save_pretrained(
        tmp_path / "tok")
    data = {"kind": "files", "train_files": [str(corpus)], "seq_len": 16, "tokenizer": str(tmp_path / "tok")}
    cfg = merge(BASE, {"output_dir": str(tmp_path / "runs"), "model": {"hf_config": TINY_LLAMA},
                       "train": {"steps": 2}})
    cfg["data"] = data
    (tmp_path / "words.yaml").write_text(yaml.safe_dump(cfg))
    train(load_config(tmp_path / "words.yaml"))
    final = tmp_path / "runs" / "words" / "final"
    saved, original = AutoTokenizer.from_pretrained(final), AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert saved.encode("the cat sat") == original.encode("the cat sat")
    assert AutoConfig.from_pretrained(final).eos_token_id == original.eos_token_id == 1  # llama's default was 2
