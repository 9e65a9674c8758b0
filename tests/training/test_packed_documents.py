"""Packed text read document by document (data.documents: separate): position_ids in the blocks,
cu_seqlens for assocmem models, transformers' packed-sequence mask for others; a token's logits
do not depend on the document before it."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from assocmem.models import HybridConfig, build_model, cu_seqlens_from_positions
from assocmem.training.config import load_config
from assocmem.training.data import ByteTokenizer, build_datasets, load_text_files, pack_dataset
from assocmem.training.loop import train
from assocmem.training.objective import CausalLMObjective, check_documents_apart, first_output
from training_helpers import BASE, TINY_LLAMA, merge

DOCS = ["first document, a bit long", "second", "", "a third one that runs over the block edge ....."]


def _hybrid(layers="gdn,attn,sca"):
    torch.manual_seed(0)
    return build_model(HybridConfig(d_model=32, layers=layers, num_heads=2, mlp_ratio=0, vocab_size=257)).eval()


def _llama():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(**{**TINY_LLAMA, "vocab_size": 257})
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def test_cu_seqlens_agree_with_transformers_packed_sequence_rule():
    from transformers.masking_utils import find_packed_sequence_indices

    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        lengths = torch.randint(1, 6, (12,), generator=gen).tolist()
        positions = torch.cat([torch.arange(n) for n in lengths])[: 3 * 7].view(3, 7)  # [B, T]
        cu = cu_seqlens_from_positions(positions)
        ours = torch.zeros(3 * 7, dtype=torch.long)     # document index of every token of the joined row
        ours[cu[1:-1]] = 1
        ours = ours.cumsum(0).view(3, 7)
        theirs = find_packed_sequence_indices(positions)  # per row, None when a row holds one document
        theirs = torch.zeros(3, 7, dtype=torch.long) if theirs is None else theirs
        assert torch.equal(ours - ours[:, :1], theirs), positions
    assert cu_seqlens_from_positions(torch.tensor([[0, 1, 2], [3, 4, 0]])).tolist() == [0, 3, 5, 6]
    with pytest.raises(ValueError, match=r"position_ids must be an integer tensor \[B, T\]"):
        cu_seqlens_from_positions(torch.zeros(4))


def test_packing_records_each_tokens_place_in_its_document(tmp_path):
    (tmp_path / "d.jsonl").write_text("".join(f'{{"text": "{d}"}}\n' for d in DOCS))
    raw = load_text_files([tmp_path / "d.jsonl"])
    joined = pack_dataset(raw, ByteTokenizer(), 16, documents="joined")
    separate = pack_dataset(raw, ByteTokenizer(), 16, documents="separate")
    assert separate["input_ids"] == joined["input_ids"]
    lengths = [len(d.encode()) + 1 for d in DOCS]  # + EOS
    places = np.concatenate([np.arange(n) for n in lengths])[: len(separate) * 16].reshape(-1, 16)
    np.testing.assert_array_equal(np.array(separate["position_ids"]), places)
    labels, ids = np.array(separate["labels"]), np.array(separate["input_ids"])
    np.testing.assert_array_equal(labels, np.where(places == 0, -100, ids))  # a document's first token
    assert "position_ids" not in joined.column_names and joined["labels"] == joined["input_ids"]


@pytest.mark.parametrize("model", ["hybrid", "llama"])
def test_a_tokens_logits_do_not_depend_on_the_document_before(model):
    net = _hybrid() if model == "hybrid" else _llama()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 24), generator=gen)
    positions = torch.tensor([list(range(9)) + list(range(15)), list(range(5)) + list(range(19))])
    changed = ids.clone()
    changed[0, :9] = torch.randint(0, 256, (9,), generator=gen)
    changed[1, :5] = torch.randint(0, 256, (5,), generator=gen)
    with torch.no_grad():
        a = first_output(net, ids, None, positions)
        b = first_output(net, changed, None, positions)
        alone = [net(input_ids=ids[0:1, 9:]).logits[0], net(input_ids=ids[1:2, 5:]).logits[0]]
        first = net(input_ids=ids[0:1, :9]).logits[0]
    torch.testing.assert_close(a[0, 9:], b[0, 9:], atol=0, rtol=0)
    torch.testing.assert_close(a[1, 5:], b[1, 5:], atol=0, rtol=0)
    torch.testing.assert_close(a[0, 9:], alone[0])   # equal to the document run by itself
    torch.testing.assert_close(a[1, 5:], alone[1])
    torch.testing.assert_close(a[0, :9], first)
    assert not torch.allclose(a[0, :9], b[0, :9])   # the changed tokens do change their own document


def test_a_model_that_mixes_documents_is_refused():
    net = _hybrid()
    objective = CausalLMObjective(net)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    check_documents_apart(objective, ids)  # assocmem: cu_seqlens

    class Joined(torch.nn.Module):  # reads the row as one sequence whatever position_ids say
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=None):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

    with pytest.raises(ValueError, match="reads a packed document together with the one before it .* "
                                         "set data.documents: joined"):
        check_documents_apart(CausalLMObjective(Joined(net)), ids)


def _text_config(tmp_path, model: dict, **data):
    words = "the cat sat on a mat while a dog ran far away".split()
    docs = [" ".join(words[(5 * i + j) % len(words)] for j in range(3 + i % 9)) for i in range(60)]
    (tmp_path / "c.txt").write_text("\n\n".join(docs))
    cfg = merge(BASE, {"output_dir": str(tmp_path / "runs"), "model": model, "train": {"steps": 3}})
    cfg["data"] = {"kind": "files", "train_files": [str(tmp_path / "c.txt")], "seq_len": 48,
                   "eval_fraction": 0.2, "sample_by": "paragraph", **data}
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path)


@pytest.mark.parametrize("model", ["hybrid", "llama"])
def test_training_reads_each_document_on_its_own(tmp_path, model):
    """The run's final evaluation equals the mean loss of its eval documents run one at a time."""
    spec = ({"hf_config": None, "hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}}
            if model == "hybrid" else {"hf_config": TINY_LLAMA})
    cfg = _text_config(tmp_path, spec)
    summary = train(cfg)
    from transformers import AutoModelForCausalLM

    import assocmem  # noqa: F401

    net = AutoModelForCausalLM.from_pretrained(tmp_path / "runs" / "text" / "final").eval()
    _, eval_ds, _ = build_datasets(cfg.data)
    alone, whole, count = 0.0, 0.0, 0
    for row in range(len(eval_ds)):
        ids, places = torch.tensor(eval_ds["input_ids"][row]), torch.tensor(eval_ds["position_ids"][row])
        starts = [t for t in range(len(ids)) if t == 0 or places[t] != places[t - 1] + 1] + [len(ids)]
        with torch.no_grad():
            row_logits = net(input_ids=ids[None]).logits[0]          # the row read as one sequence
            for s, e in zip(starts, starts[1:]):
                if e - s < 2:
                    continue
                logits = net(input_ids=ids[None, s:e]).logits[0, :-1]  # the document by itself
                alone += float(F.cross_entropy(logits, ids[s + 1:e], reduction="sum"))
                whole += float(F.cross_entropy(row_logits[s:e - 1], ids[s + 1:e], reduction="sum"))
                count += e - s - 1
    assert summary["eval"]["loss"] == pytest.approx(alone / count, rel=1e-5)
    assert abs(whole - alone) / alone > 1e-4  # reading across documents would give another number


def test_a_run_saved_before_documents_existed_resumes_only_as_joined(tmp_path):
    from assocmem.training.runlog import check_run_dir

    cfg = _text_config(tmp_path, {"hf_config": TINY_LLAMA})
    train(cfg)
    saved = tmp_path / "runs" / "text" / "config.yaml"
    raw = yaml.safe_load(saved.read_text())
    del raw["data"]["documents"]  # as an older assocmem wrote it
    saved.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=r"changed: \['data.documents'\]"):
        check_run_dir(cfg, resume=True, overwrite=False)
    joined = cfg.model_copy(update={"data": cfg.data.model_copy(update={"documents": "joined"})})
    assert check_run_dir(joined, resume=True, overwrite=False) == tmp_path / "runs" / "text"
