"""Batched sampling through generate(): greedy = an argmax loop, sampling = a hand-written sampler,
log-probabilities = a teacher-forced forward, seeded, the model's own generation config ignored."""
import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from assocmem.models import HybridConfig, build_model
from assocmem.training.generation import SamplingSettings, check_context, context_limits, sample_completions

pytestmark = pytest.mark.usefixtures("one_thread")

EOS, PAD, V = 12, 13, 14


def _hybrid(layers="gdn,attn"):
    torch.manual_seed(0)
    return build_model(HybridConfig(d_model=32, vocab_size=V, layers=layers, num_heads=2, mlp_ratio=2)).double().eval()


def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=32)   # config eos_token_id = 2
    return LlamaForCausalLM(cfg).double().eval()


MODELS = {"assocmem": _hybrid, "llama": _llama}
PROMPTS = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [3, 3, 3, 3, 3, 3]]


def _argmax_loop(model, prompt, steps, eos):
    seq = list(prompt)
    for _ in range(steps):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        seq.append(int(logits.argmax()))
        if seq[-1] == eos:
            break
    return tuple(seq[len(prompt):])


@pytest.mark.parametrize("name", MODELS)
def test_greedy_equals_an_argmax_loop_with_mixed_prompt_lengths(name):
    model = MODELS[name]()
    for eos in (None, 4):
        out = sample_completions(model, PROMPTS, SamplingSettings(temperature=0, max_new_tokens=6, batch_size=3),
                                 eos_token_id=eos, pad_token_id=PAD)
        for prompt, (response,) in zip(PROMPTS, out.responses):
            assert response == _argmax_loop(model, prompt, 6, eos)


@pytest.mark.parametrize("name", MODELS)
def test_sampling_equals_a_hand_written_sampler(name):
    """softmax(logits / T) in float32 and torch.multinomial per step, finished rows padded (what
    generate() does), from the same seed: the same tokens."""
    model, prompt, n, T = MODELS[name](), [5, 1, 7], 6, 0.7
    settings = SamplingSettings(num_samples=n, temperature=T, max_new_tokens=5, batch_size=64, seed=11)
    out = sample_completions(model, [prompt], settings, eos_token_id=EOS, pad_token_id=PAD)
    torch.manual_seed(11)
    seq = torch.tensor([prompt] * n)
    done = torch.zeros(n, dtype=torch.bool)
    for _ in range(5):
        logits = model(input_ids=seq).logits[:, -1].to(torch.float32)
        nxt = torch.multinomial(F.softmax(logits / T, dim=-1), 1)[:, 0]
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        seq = torch.cat([seq, nxt[:, None]], dim=1)
        done |= nxt == EOS
    for j in range(n):
        tokens = [int(t) for t in seq[j, 3:]]
        expected = tuple(tokens[: tokens.index(EOS) + 1]) if EOS in tokens else tuple(tokens)
        assert out.responses[0][j] == expected
    greedy = sample_completions(model, [prompt], SamplingSettings(temperature=0, max_new_tokens=5),
                                eos_token_id=EOS, pad_token_id=PAD).responses[0][0]
    for cut in ({"top_k": 1}, {"top_p": 1e-9}):                # keep one token: greedy again
        narrow = sample_completions(model, [prompt], settings.model_copy(update=cut), eos_token_id=EOS,
                                    pad_token_id=PAD)
        assert all(r == greedy for r in narrow.responses[0])


def test_the_models_own_generation_config_is_ignored():
    model = _llama()
    plain = sample_completions(model, PROMPTS, SamplingSettings(temperature=0, max_new_tokens=8),
                               eos_token_id=None, pad_token_id=PAD)
    model.generation_config.repetition_penalty = 5.0
    model.generation_config.top_k = 2
    again = sample_completions(model, PROMPTS, SamplingSettings(temperature=0, max_new_tokens=8),
                               eos_token_id=None, pad_token_id=PAD)
    assert plain.responses == again.responses and model.generation_config.repetition_penalty == 5.0
    assert all(len(r[0]) == 8 for r in plain.responses)        # the config's eos id 2 does not stop it
    assert any(2 in r[0] for r in plain.responses + [[_argmax_loop(model, [2, 2], 8, None)]])


@pytest.mark.parametrize("name", MODELS)
def test_logprobs_equal_a_teacher_forced_forward(name):
    model = MODELS[name]()
    out = sample_completions(model, PROMPTS, SamplingSettings(num_samples=3, max_new_tokens=5, batch_size=5, seed=2),
                             eos_token_id=EOS, pad_token_id=PAD, logprobs=True)
    for i, prompt in enumerate(PROMPTS):
        for j, response in enumerate(out.responses[i]):
            seq = torch.tensor([list(prompt) + list(response)])
            logp = F.log_softmax(model(input_ids=seq).logits[0, :-1].detach(), dim=-1)
            expected = sum(float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(response))
            assert abs(out.logprob_sum[i, j] - expected) <= 1e-10
            assert out.num_tokens[i, j] == len(response) and out.finished[i, j] == (response[-1] == EOS)


def test_seeded_reproducible_and_the_callers_rng_is_untouched():
    model = _hybrid()
    settings = SamplingSettings(num_samples=4, max_new_tokens=6, seed=3)
    state = torch.get_rng_state()
    a = sample_completions(model, PROMPTS, settings, eos_token_id=EOS, pad_token_id=PAD)
    assert torch.equal(torch.get_rng_state(), state)
    b = sample_completions(model, PROMPTS, settings, eos_token_id=EOS, pad_token_id=PAD)
    c = sample_completions(model, PROMPTS, settings.model_copy(update={"seed": 4}), eos_token_id=EOS, pad_token_id=PAD)
    assert a.responses == b.responses and a.responses != c.responses
    with pytest.raises(ValueError, match="at least one token"):
        sample_completions(model, [[]], settings, eos_token_id=EOS, pad_token_id=PAD)


def test_context_limits():
    sca = build_model(HybridConfig(d_model=32, vocab_size=V, layers="sca,attn", num_heads=2,
                                   overrides={"sca": {"sca": {"maxlen": 64}}}))
    assert [(lim.tokens, lim.hard) for lim in context_limits(sca)] == [(64, True)]
    assert check_context(sca, 64, "the prompt") == []
    with pytest.raises(ValueError, match="the prompt needs 65 tokens: SCA layers are defined up to sca.maxlen=64"):
        check_context(sca, 65, "the prompt")
    llama = _llama()
    assert check_context(llama, 40, "context 40") == [
        "context 40 (40 tokens) is beyond max_position_embeddings=32 (the position/RoPE range of the config)"]
    assert context_limits(_hybrid()) == []
