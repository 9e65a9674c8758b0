"""data.kind: mixture -- weighted sources in stages (training/mixture.py): config checks naming the field, a
draw that is a function of (seed, step), the drawn mixture against the weights, exact resume across a stage
boundary, save_to_disk sources read without a cache."""
import json
import math
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
from safetensors.torch import load_file

from assocmem.training.config import ConfigError, config_from_dict
from assocmem.training.data import build_datasets, load_tokenizer
from assocmem.training.loop import train
from assocmem.training.mixture import Mixture, MixtureSampler, expected_counts
from assocmem.training.runlog import read_log
from training_helpers import merge

WORDS = "memory state key value recall token layer step source stage weight mixture".split()


@pytest.fixture
def corpus(tmp_path):
    """Two sources: paragraphs of prose (.txt) and question/answer records (.jsonl)."""
    rng = np.random.default_rng(0)
    prose = tmp_path / "prose.txt"
    prose.write_text("\n\n".join(" ".join(rng.choice(WORDS, 50)) for _ in range(40)))
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"q": f"What is {i} + {i}?", "a": f"{2 * i}. #### {2 * i}"}) + "\n"
                          for i in range(80)))
    return {"prose": str(prose), "qa": str(qa)}


def mixture_config(tmp_path, corpus, **update) -> dict:
    base = {
        "name": "mix", "output_dir": str(tmp_path / "runs"), "seed": 3,
        "model": {"hybrid": {"d_model": 16, "layers": "gdn,attn", "mlp_ratio": 0, "num_heads": 2}},
        "data": {"kind": "mixture", "seq_len": 16, "eval_fraction": 0.1,
                 "sources": {"prose": {"files": [corpus["prose"]], "sample_by": "paragraph"},
                             "qa": {"files": [corpus["qa"]], "text_field": ["q", "a"]}},
                 "weights": {"prose": 3, "qa": 1},
                 "stages": [{"step": 3, "weights": {"qa": 1}, "seq_len": 32}]},
        "optim": {"lr": 3e-3, "warmup_steps": 1},
        "train": {"steps": 6, "batch_size": 4, "log_every": 1, "progress": False, "threads": 1,
                  "eval_batch_size": 16},
    }
    return merge(base, update)


# ---------------------------------------------------------------- config checks
@pytest.mark.parametrize("update, message", [
    ({"data": {"weights": {"prose": 1, "poetry": 1}}}, "data.weights names ['poetry'], which is not a source"),
    ({"data": {"stages": [{"step": 3, "weights": {"qa": 1, "news": 2}}]}}, "data.stages[0].weights names ['news']"),
    ({"data": {"weights": {"prose": -1, "qa": 1}}}, "data.weights: weights must be >= 0, got {'prose': -1.0}"),
    ({"data": {"weights": {"prose": 0, "qa": 0}}}, "data.weights: the weights sum to 0"),
    ({"data": {"stages": [{"step": 3}, {"step": 3, "seq_len": 8}]}},
     "data.stages[1].step=3 must be greater than data.stages[0].step=3"),
    ({"data": {"stages": [{"step": 6}]}}, "data.stages[0].step=6 is not before train.steps=6"),
    ({"train": {"steps": None, "epochs": 1}}, "set train.steps instead of train.epochs"),
    ({"data": {"sources": {"prose": {"dataset": "somewhere"}}}}, "exactly one of files"),
])
def test_bad_mixtures_are_refused_naming_the_field(tmp_path, corpus, update, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict(mixture_config(tmp_path, corpus, **update))
    assert message in str(err.value)


def test_distillation_stages_refuse_a_mixture(tmp_path, corpus):
    from assocmem.training.distill.config import distill_config_from_dict

    data = mixture_config(tmp_path, corpus)["data"]
    with pytest.raises(ConfigError, match="stages 2 and 3 read one dataset"):
        distill_config_from_dict({"name": "d", "teacher": "t", "student": {"replace": [0]}, "data": data})


# ---------------------------------------------------------------- the draw
def _sampler(tmp_path, corpus, batch_size=8, **data) -> MixtureSampler:
    cfg = config_from_dict(mixture_config(tmp_path, corpus, data=data, train={"steps": 1000}))
    return MixtureSampler(Mixture(cfg.data, load_tokenizer("bytes")), batch_size, seed=cfg.seed)


def test_the_batch_of_a_step_does_not_depend_on_what_was_drawn_before(tmp_path, corpus):
    sequential = _sampler(tmp_path, corpus)
    rows = [sequential.batch(s)[1] for s in range(8)]
    fresh = _sampler(tmp_path, corpus)
    for s in (6, 2, 7, 3, 0):  # random access, across the boundary at step 3
        np.testing.assert_array_equal(fresh.batch(s)[1], rows[s])
    assert len(sequential.batch(2)[0][0]["input_ids"]) == 16 and len(sequential.batch(3)[0][0]["input_ids"]) == 32


def test_each_source_is_read_in_epochs_without_repeats(tmp_path, corpus):
    sampler = _sampler(tmp_path, corpus, stages=[])
    offsets = sampler.mixture.offsets(0)
    n_qa = int(offsets[2] - offsets[1])
    qa_rows = []
    step = 0
    while len(qa_rows) < n_qa:
        _, rows = sampler.batch(step)
        qa_rows += [int(r) for r, src in zip(rows, sampler.sources(step)) if src == 1]
        step += 1
    assert sorted(qa_rows[:n_qa]) == list(range(int(offsets[1]), int(offsets[2])))  # one full epoch, no repeat


def test_the_drawn_mixture_matches_the_weights(tmp_path, corpus):
    """Counts of n = B·steps draws per stage: within 4 binomial standard deviations √(n p (1 − p)) of n·p
    (a two-sided 4σ band: a correct sampler lands outside with probability 6e-5 per source; the draws
    are seeded, so the test is deterministic), and exactly 0 for a source of weight 0."""
    sampler = _sampler(tmp_path, corpus, batch_size=32, weights={"prose": 3, "qa": 1},
                       stages=[{"step": 300, "weights": {"prose": 1, "qa": 4}}, {"step": 600, "weights": {"qa": 1}}])
    for start, stop, p_prose in ((0, 300, 0.75), (300, 600, 0.2), (600, 700, 0.0)):
        drawn = sampler.counts(start, stop)
        n = 32 * (stop - start)
        assert drawn["prose"] + drawn["qa"] == n
        assert expected_counts(sampler.mixture, 32, start, stop)["prose"] == pytest.approx(n * p_prose)
        assert abs(drawn["prose"] - n * p_prose) <= 4 * math.sqrt(n * p_prose * (1 - p_prose))
    assert sampler.counts(600, 700)["prose"] == 0


# ---------------------------------------------------------------- training
def test_the_log_records_the_drawn_mixture(tmp_path, corpus):
    train(config_from_dict(mixture_config(tmp_path, corpus)))
    log = [r for r in read_log(tmp_path / "runs" / "mix" / "log.jsonl") if r["split"] == "train"]
    sampler = _sampler(tmp_path, corpus, batch_size=4)
    assert [r["stage"] for r in log] == [0, 0, 0, 1, 1, 1]
    assert [(r["mix/prose"], r["mix/qa"]) for r in log] == [tuple(sampler.counts(s, s + 1).values()) for s in range(6)]
    assert all(r["mix/prose"] == 0 for r in log[3:])  # stage 1 draws qa only
    assert [r["tokens"] for r in log] == [64, 128, 192, 320, 448, 576]  # seq_len 16, then 32


def _weights(run):
    return load_file(run / "checkpoints" / "step_00000006" / "model.safetensors")


def test_resume_before_and_after_a_stage_boundary_is_exact(tmp_path, corpus):
    """6 steps straight vs killed after step 2 (before the boundary at step 3) or step 4 (after it) and resumed:
    bitwise equal parameters."""
    cfg = config_from_dict(mixture_config(tmp_path, corpus, train={"checkpoint_every": 1, "keep_last": 10}))
    train(cfg)
    straight = tmp_path / "runs" / "mix"
    reference = _weights(straight)
    for kept in (2, 4):
        run = tmp_path / "runs" / f"killed{kept}"
        shutil.copytree(straight, run)
        for later in range(kept + 1, 7):
            shutil.rmtree(run / "checkpoints" / f"step_{later:08d}")
        (run / "summary.json").unlink()
        train(cfg.model_copy(update={"name": f"killed{kept}"}), resume=True)
        resumed = _weights(run)
        assert resumed.keys() == reference.keys()
        for name in reference:
            assert resumed[name].equal(reference[name]), (kept, name)


def test_a_saved_dataset_source_is_read_without_a_cache(tmp_path, corpus, monkeypatch):
    folder = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(
        {"body": [f"record {i}: " + " ".join(WORDS) for i in range(30)]})}).save_to_disk(str(folder))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    cache = Path(datasets.config.HF_DATASETS_CACHE)
    cached = sorted(cache.rglob("*")) if cache.is_dir() else []
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    cfg = config_from_dict(mixture_config(tmp_path, corpus, data={
        "sources": {"saved": {"dataset": str(folder), "split": "train", "text_field": "body"}},
        "weights": {"saved": 1, "prose": 1}, "stages": []}))
    mixture, held_out, vocab = build_datasets(cfg.data)
    assert vocab == 257 and held_out is not None
    assert mixture.names == ["prose", "qa", "saved"]
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before  # no cache file beside the data
    assert not home.exists()                                                    # nor in the home folder
    assert (sorted(cache.rglob("*")) if cache.is_dir() else []) == cached       # nor in datasets' cache
    with pytest.raises(ValueError, match=r"data.sources.saved: dataset '.*saved' holds the splits \['train'\]; set "
                                         r"split"):
        build_datasets(cfg.data.model_copy(update={"sources": {
            **cfg.data.sources, "saved": cfg.data.sources["saved"].model_copy(update={"split": None})}}))


def test_too_little_text_for_a_block_is_refused_naming_the_source(tmp_path, corpus):
    cfg = config_from_dict(mixture_config(tmp_path, corpus, data={"stages": [{"step": 3, "weights": {"qa": 1},
                                                                                "seq_len": 8192}]}))
    with pytest.raises(ValueError, match=r"data.sources.qa: \d+ training tokens, fewer than one block of "
                                         r"seq_len=8192, which stage 1 draws it at"):
        build_datasets(cfg.data)
    cfg = config_from_dict(mixture_config(tmp_path, corpus, data={"eval_fraction": 0.01,
                                                                  "stages": [{"step": 3, "seq_len": 1024}]}))
    with pytest.raises(ValueError, match=r"eval_fraction=0.01 holds out \d+ tokens, fewer than one block of the last "
                                         r"stage's seq_len=1024"):
        build_datasets(cfg.data)
