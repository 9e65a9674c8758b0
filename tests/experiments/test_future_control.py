"""Random-future control: a causal LM (transformers' Llama) loses nothing, bit for bit; a model
that reads the next token from the input is found out."""
import pytest
import torch
import transformers

from assocmem.probes.experiments.future_control import future_control


class NextTokenCheat(torch.nn.Module):
    """logits at t put all mass on x_{t+1} (the label): loss 0 when the future is real."""

    def forward(self, input_ids):
        nxt = torch.roll(input_ids, -1, dims=1)
        logits = torch.nn.functional.one_hot(nxt, 16).double() * 30.0
        return transformers.modeling_outputs.CausalLMOutput(logits=logits)


def _blocks():
    return torch.randint(0, 16, (6, 20), generator=torch.Generator().manual_seed(0))


def test_causal_model_is_unchanged_bit_for_bit():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg).eval()
    report = future_control(model, _blocks(), [0, 5, 11, 18], random_ids=16, batch_size=4)
    assert report.rise == 0.0 and report.per_cut_real == report.per_cut_random_future
    assert 2.0 < report.loss_real < 3.5  # ≈ ln 16 at init


def test_model_reading_the_future_is_found_out():
    report = future_control(NextTokenCheat(), _blocks(), [0, 5, 11, 18], random_ids=16)
    assert report.loss_real < 1e-10
    assert report.loss_random_future > 20.0  # the random next token is right 1 time in 16, at ~0 loss


def test_cuts_are_checked():
    with pytest.raises(ValueError, match="cuts"):
        future_control(NextTokenCheat(), _blocks(), [19], random_ids=16)
