"""Bad input to ``assocmem rl`` is refused with the field named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from assocmem.training.config import ConfigError
from assocmem.training.rl import REWARDS, register_reward
from assocmem.training.rl.config import load_rl_config, rl_config_from_dict
from assocmem.training.rl.loop import train_rl
from assocmem.training.rl.rewards import score
from assocmem.training.verifiable import ChainSum
from rl_helpers import BASE, merge, write_config


@pytest.mark.parametrize("update, field", [
    ({"rollout": {"group_size": 1}}, "rollout.group_size"),
    ({"data": {"num_train": 0}}, "data.num_train"),
    ({"rollout": {"temperature": 0.0}}, "rollout.temperature"),
    ({"loss": {"aggregation": "mean"}}, "loss.aggregation"),
    ({"loss": {"beta": float("nan")}}, "loss.beta"),
    ({"rollout": {"group": 8}}, "rollout.group"),
], ids=["G<2", "empty-prompt-set", "greedy-rollouts", "unknown-aggregation", "nan-beta", "unknown-key"])
def test_config_errors_name_the_field(update, field):
    with pytest.raises(ConfigError, match=rf"\n  {field}: "):
        rl_config_from_dict(merge(BASE, update))


def test_a_kl_weight_with_self_distillation_is_refused():
    """Self-distillation steps on the CE of its kept completions only: β > 0 would be silently unused."""
    with pytest.raises(ConfigError, match=r"\n  loss: .*loss.beta = 0.1 has no effect with loss.algorithm: "
                                          r"self_distillation.*set loss.beta: 0, or choose policy_gradient or balanced"):
        rl_config_from_dict(merge(BASE, {"loss": {"algorithm": "self_distillation", "beta": 0.1}}))
    for algorithm in ("policy_gradient", "balanced"):
        assert rl_config_from_dict(merge(BASE, {"loss": {"algorithm": algorithm, "beta": 0.1}})).loss.beta == 0.1
    assert rl_config_from_dict(merge(BASE, {"loss": {"algorithm": "self_distillation", "beta": 0}})).loss.beta == 0


@pytest.mark.parametrize("scale", ["group", "batch"])
def test_self_distillation_refuses_std_scaled_advantages(scale):
    """Nautile §4.4 scores "without standard-deviation normalization": A = r − mean weighs a prompt solved
    once in 4 at 0.75 and one solved twice at 0.5 (× 1.5); ÷ group std gives 1.5 and 0.866 (× 1.73)."""
    from assocmem.training.rl.advantages import group_advantages

    r = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.float64)
    kept = lambda a: [float(a[0, 0]), float(a[1, 0])]  # noqa: E731  the first completion of each group is kept
    assert kept(group_advantages(r, "none")) == [0.75, 0.5]
    np.testing.assert_allclose(kept(group_advantages(r, "group")), [0.75 / (0.5 + 1e-4), 0.5 / (3 ** -0.5 + 1e-4)],
                               rtol=0, atol=1e-15)
    with pytest.raises(ConfigError, match=rf"rollout.advantage_scale: {scale} divides the advantages by a standard "
                                          r"deviation.*self_distillation.*set rollout.advantage_scale: none"):
        rl_config_from_dict(merge(BASE, {"rollout": {"advantage_scale": scale},
                                         "loss": {"algorithm": "self_distillation", "beta": 0}}))
    assert rl_config_from_dict(merge(BASE, {"rollout": {"advantage_scale": scale}})).rollout.advantage_scale == scale
    assert rl_config_from_dict(merge(BASE, {"loss": {"algorithm": "self_distillation", "beta": 0}})
                               ).rollout.advantage_scale == "none"


def test_set_overrides_are_validated(tmp_path):
    path = write_config(tmp_path, "x")
    assert load_rl_config(path, ["loss.algorithm=self_distillation", "loss.beta=0"]).loss.algorithm == "self_distillation"
    with pytest.raises(ConfigError, match="rollout.group_size"):
        load_rl_config(path, ["rollout.group_size=1"])


@pytest.fixture
def task_batch():
    task = ChainSum(num_digits=3)
    problems = task.problems(2, seed=0)
    responses = [[(1, 2, 3, 11, 6, 12)] * 3, [(11, 1, 12)] * 3]
    return task, problems, responses


def test_reward_of_the_wrong_shape_or_nan_is_refused(task_batch):
    task, problems, responses = task_batch
    name_shape, name_nan = "test_wrong_shape", "test_nan"
    if name_shape not in REWARDS:
        register_reward(name_shape, lambda t, p, r: np.zeros((len(p), 2)))
        register_reward(name_nan, lambda t, p, r: [[0.0, float("nan"), 1.0] for _ in p])
    with pytest.raises(ValueError, match=r"rollout.reward 'test_wrong_shape' returned shape \(2, 2\).*shape \(2, 3\)"):
        score(name_shape, task, problems, responses)
    with pytest.raises(ValueError, match=r"rollout.reward 'test_nan' returned nan for completion 1 of prompt 0"):
        score(name_nan, task, problems, responses)
    with pytest.raises(ValueError, match="already registered"):
        register_reward("correct", lambda t, p, r: None)
    with pytest.raises(ValueError, match=r"rollout.reward: unknown reward 'nope'.*correct"):
        score("nope", task, problems, responses)
    assert score("correct", task, problems, responses).tolist() == [[float(problems[0].info["answer"] == 6)] * 3,
                                                                  [float(problems[1].info["answer"] == 1)] * 3]


def test_nan_reward_stops_the_run_before_an_update(tmp_path):
    if "test_nan_run" not in REWARDS:
        register_reward("test_nan_run", lambda t, p, r: [[float("nan")] * len(g) for g in r])
    cfg = load_rl_config(write_config(tmp_path, "nan", {"rollout": {"reward": "test_nan_run"}}))
    with pytest.raises(ValueError, match="rollout.reward 'test_nan_run' returned nan"):
        train_rl(cfg)


def test_reference_of_another_architecture_is_refused(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    other = LlamaForCausalLM(LlamaConfig(vocab_size=14, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    other.save_pretrained(tmp_path / "llama")
    cfg = load_rl_config(write_config(tmp_path, "ref", {"reference": str(tmp_path / "llama")}))
    with pytest.raises(ValueError, match=r"reference=.*llama holds another architecture.*model_type: policy "
                                         r"'assocmem', reference 'llama'"):
        train_rl(cfg)
    assert not (tmp_path / "runs" / "ref").exists()  # refused before the run folder is made
