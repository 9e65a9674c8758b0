"""Cross-architecture distillation (training/distill/): stage 2's alignment loss is 0 for the copied softmax
attention and trains only what it should; stage 3's loss is eqs 3.23-3.24 (against an explicit float64 sum and
torch's kl_div); the stages resume exactly after a crash; bad configs are refused before any work, field named."""
from __future__ import annotations

import importlib
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from assocmem.mixers.retype import float64_retyped
from assocmem.models.convert import from_hf_causal_lm
from assocmem.training.config import ConfigError
from assocmem.training.distill import (AlignmentObjective, DistillConfig, kd_loss, label_all_positions,
                                       load_distill_config, run_distill)
from assocmem.training.distill.stages import trainable_parameters
from assocmem.training.tasks import arrays_to_dataset

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 64


def llama(tmp_path, name="teacher", seed=0, **extra):
    """A small random LlamaForCausalLM (3 layers, 4 heads, 2 KV heads) saved to tmp_path/name."""
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, rope_theta=500.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**kw, **extra}))
    model.save_pretrained(tmp_path / name)
    return model.eval(), tmp_path / name


# ---------------------------------------------------------------- stage 2
@pytest.mark.parametrize("target", ["heads", "output"])
def test_alignment_loss_is_zero_for_the_copied_softmax_attention(target, tmp_path):
    teacher, _ = llama(tmp_path)
    student = from_hf_causal_lm(teacher, replace=[])  # every layer the teacher's attention, copied
    ids = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(3))
    labels = ids.clone()
    with torch.no_grad():
        loss32, count, _ = AlignmentObjective(student, teacher, [0, 1, 2], target)(ids, labels)
        module = importlib.import_module("transformers.models.llama.modeling_llama")
        teacher64, student64 = teacher.double(), student.double()
        with float64_retyped(module):  # the teacher's own RoPE and softmax in float64
            rotary = teacher64.model.rotary_emb
            rotary.inv_freq = rotary.compute_default_rope_parameters(teacher64.config)[0]
            loss64, _, _ = AlignmentObjective(student64, teacher64, [0, 1, 2], target)(ids, labels)
    assert int(count) == 2 * 19                       # every position n ∈ {1..T} (eq. 3.21), the last one too
    assert float(loss32) <= 1e-11, float(loss32)      # float32 round-off, squared
    assert float(loss64) <= 1e-26, float(loss64)      # float64: the same function


def test_alignment_loss_matches_eq_3_22_by_hand(tmp_path):
    """A GDN student: the objective equals 1/(MH) Σ_m Σ_h (1/d)‖y − ŷ‖² summed over every position n ∈ {1..T}
    (the thesis: "for all n ∈ {1, …, T}"), computed here from the teacher's q/k/v with our own softmax (not the
    teacher's forward); leaving out each row's last position, as a next-token count would, gives another number."""
    teacher, _ = llama(tmp_path)
    torch.manual_seed(1)
    student = from_hf_causal_lm(teacher, replace=[0, 2], student="gdn")
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(4))
    labels = ids.clone()
    labels[1, 8:] = -100                                                    # right padding: row 1 holds 8 positions
    with torch.no_grad():
        objective = AlignmentObjective(student, teacher, [0, 2], "heads")
        loss, count, _ = objective(ids, labels)
        streams = teacher(ids, output_hidden_states=True).hidden_states     # residual stream entering each layer
        cos, sin = teacher.model.rotary_emb(streams[0], torch.arange(11)[None])
        per_position = 0.0
        for m in (0, 2):
            layer = teacher.model.layers[m]
            h = layer.input_layernorm(streams[m])
            attn = layer.self_attn
            q = attn.q_proj(h).view(2, 11, 4, 8).transpose(1, 2)
            k = attn.k_proj(h).view(2, 11, 2, 8).transpose(1, 2).repeat_interleave(2, 1)
            v = attn.v_proj(h).view(2, 11, 2, 8).transpose(1, 2).repeat_interleave(2, 1)
            rot = lambda t: torch.cat([-t[..., 4:], t[..., :4]], -1)  # noqa: E731  rotate_half
            q, k = q * cos[:, None] + rot(q) * sin[:, None], k * cos[:, None] + rot(k) * sin[:, None]
            scores = (q @ k.transpose(-1, -2)) / 8 ** 0.5 + torch.full((11, 11), float("-inf")).triu(1)
            y = (scores.softmax(-1) @ v).transpose(1, 2)                                  # [B, T, H, d]
            mixer = student.model.layers[m].mixer
            seen = {}
            hook = mixer.o_proj.register_forward_pre_hook(lambda mod, a: seen.setdefault("y", a[0]))
            mixer(h, return_state=False)
            hook.remove()
            y_hat = seen["y"].view(2, 11, 4, 8)
            per_position = per_position + ((y - y_hat) ** 2).sum(-1).div(8).sum(-1).div(4 * 2)  # [B, T]; 1/(H·M)
    total = per_position[0].sum() + per_position[1, :8].sum()
    but_last = per_position[0, :-1].sum() + per_position[1, :7].sum()
    assert int(count) == 11 + 8 == int(objective.scored(labels).sum())  # what the training loop divides by
    torch.testing.assert_close(loss, total, rtol=1e-5, atol=1e-7)
    assert float(total - but_last) > 1e3 * (1e-5 * float(total) + 1e-7)  # the two readings are far apart


@pytest.mark.parametrize("which", ["mixer", "new"])
def test_alignment_gradients_reach_only_the_trainable_parameters(which, tmp_path):
    teacher, _ = llama(tmp_path)
    student = from_hf_causal_lm(teacher, replace=[1], student="gdn")
    chosen = set(trainable_parameters(student, [1], which, before_o_proj=True))
    for name, p in student.named_parameters():
        p.requires_grad_(name in chosen)
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(5))
    loss, _, _ = AlignmentObjective(student, teacher, [1], "heads")(ids, ids.clone())
    loss.backward()
    got = {n for n, p in student.named_parameters() if p.grad is not None and bool(p.grad.abs().sum() > 0)}
    assert got == chosen
    assert all(n.startswith("model.layers.1.mixer.") for n in chosen)
    assert ("model.layers.1.mixer.qkv_proj.weight" in chosen) == (which == "mixer")
    assert "model.layers.1.mixer.o_proj.weight" not in chosen  # target heads: read before o_proj
    assert len(chosen) == (8 if which == "mixer" else 7)    # A_log, dt_bias, norm, (qkv), conv, a, b, g
    assert all(p.grad is None for p in teacher.parameters())


# ---------------------------------------------------------------- stage 3
def _explicit(student, teacher, targets, direction, tau, w_kl, w_ce):
    """Eqs 3.23-3.24 as written, one position and one vocabulary entry at a time (Python floats, float64)."""
    out = []
    for n in range(student.shape[0]):
        zs, zt = [float(z) / tau for z in student[n]], [float(z) / tau for z in teacher[n]]
        ps = [math.exp(z) / sum(math.exp(u) for u in zs) for z in zs]
        pt = [math.exp(z) / sum(math.exp(u) for u in zt) for z in zt]
        a, b = (ps, pt) if direction == "reverse" else (pt, ps)
        kl = sum(a[i] * math.log(a[i] / b[i]) for i in range(len(a)))
        z1 = [float(z) for z in student[n]]
        ce = -math.log(math.exp(z1[targets[n]]) / sum(math.exp(u) for u in z1))
        out.append(w_kl * tau ** 2 * kl + w_ce * ce)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("direction", ["reverse", "forward"])
@pytest.mark.parametrize("tau,w_kl,w_ce", [(1.0, 1.0, 0.0), (2.0, 0.7, 0.3)])
def test_kd_loss_is_the_explicit_sum(direction, tau, w_kl, w_ce):
    g = torch.Generator().manual_seed(7)
    s, t = torch.randn(5, 9, generator=g, dtype=torch.float64) * 2, torch.randn(5, 9, generator=g, dtype=torch.float64)
    y = torch.randint(0, 9, (5,), generator=g)
    got = kd_loss(s, t, y, direction=direction, temperature=tau, w_kl=w_kl, w_ce=w_ce)
    torch.testing.assert_close(got, _explicit(s, t, y, direction, tau, w_kl, w_ce), rtol=0, atol=1e-12)


def test_kd_loss_against_torch_kl_div():
    """torch's kl_div(input = log Q_student, target = P_teacher) is the forward KL; swapped, the reverse one."""
    g = torch.Generator().manual_seed(8)
    s, t = torch.randn(6, 11, generator=g, dtype=torch.float64), torch.randn(6, 11, generator=g, dtype=torch.float64)
    y = torch.zeros(6, dtype=torch.long)
    ls, lt = F.log_softmax(s / 1.5, -1), F.log_softmax(t / 1.5, -1)
    fwd = F.kl_div(ls, lt, log_target=True, reduction="none").sum(-1) * 1.5 ** 2
    rev = F.kl_div(lt, ls, log_target=True, reduction="none").sum(-1) * 1.5 ** 2
    args = dict(temperature=1.5, w_kl=1.0, w_ce=0.0)
    torch.testing.assert_close(kd_loss(s, t, y, direction="forward", **args), fwd, rtol=0, atol=1e-13)
    torch.testing.assert_close(kd_loss(s, t, y, direction="reverse", **args), rev, rtol=0, atol=1e-13)


def test_kd_is_zero_for_the_teacher_itself_and_forward_differs_from_reverse():
    g = torch.Generator().manual_seed(9)
    s, t = torch.randn(4, 7, generator=g, dtype=torch.float64), torch.randn(4, 7, generator=g, dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.long)
    for direction in ("reverse", "forward"):
        same = kd_loss(t, t, y, direction=direction, temperature=2.0, w_kl=1.0, w_ce=0.0)
        assert float(same.abs().max()) <= 1e-15
    fwd = kd_loss(s, t, y, direction="forward", temperature=1.0, w_kl=1.0, w_ce=0.0)
    rev = kd_loss(s, t, y, direction="reverse", temperature=1.0, w_kl=1.0, w_ce=0.0)
    assert float((fwd - rev).abs().min()) > 1e-3
    assert bool((fwd > 0).all() and (rev > 0).all())


def test_label_all_positions_stops_at_the_last_supervised_one():
    ds = arrays_to_dataset({"input_ids": np.array([[5, 6, 7, 8, 0, 0], [1, 2, 3, 4, 5, 6], [9, 9, 9, 9, 9, 9]]),
                            "labels": np.array([[-100, -100, 7, 8, -100, -100], [-100, 2, -100, -100, 5, -100],
                                                    [-100] * 6])})
    out = label_all_positions(ds)
    assert out["labels"] == [[5, 6, 7, 8, -100, -100], [1, 2, 3, 4, 5, -100], [-100] * 6]
    assert out["input_ids"] == ds["input_ids"]


# ---------------------------------------------------------------- the stages as run folders
def _config(tmp_path, teacher, **over) -> DistillConfig:
    loop = {"steps": 6, "batch_size": 8, "log_every": 1, "checkpoint_every": 2, "eval_batch_size": 16,
            "progress": False}
    data = {"name": "d", "output_dir": str(tmp_path / "runs"), "teacher": str(teacher),
            "student": {"mixer": "gdn", "replace": [1], "identity_conv": True},
            "data": {"kind": "mqar", "seq_len": 24, "num_kv_pairs": 3, "vocab_size": VOCAB, "num_train": 48,
                     "num_eval": 16},
            "stage2": {"optim": {"lr": 3e-3}, "train": loop},
            "stage3": {"temperature": 2.0, "w_ce": 0.5, "optim": {"lr": 3e-3}, "train": loop},
            "stage4": {"optim": {"lr": 1e-3}, "train": loop}}
    data.update(over)
    return DistillConfig.model_validate(data)


class Crash(RuntimeError):
    pass


def test_four_stages_resume_exactly_after_a_crash(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from assocmem.training.loop import Trainer

    _, folder = llama(tmp_path)
    straight = run_distill(_config(tmp_path, folder, name="straight"))
    step = Trainer.train_step

    def crash_in_stage3(self):
        if self.run_dir.name == "stage3" and self.step == 3:
            raise Crash("killed")
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", crash_in_stage3)
    with pytest.raises(Crash):
        run_distill(_config(tmp_path, folder, name="crashed"))
    monkeypatch.setattr(Trainer, "train_step", step)
    resumed = run_distill(_config(tmp_path, folder, name="crashed"))  # stages 1, 2 skipped; 3 resumed at step 2
    root = tmp_path / "runs"
    assert sorted(resumed) == ["stage1", "stage2", "stage3", "stage4"]
    for k in (2, 3, 4):
        a = load_file(root / "straight" / f"stage{k}" / "final" / "model.safetensors")
        b = load_file(root / "crashed" / f"stage{k}" / "final" / "model.safetensors")
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), (k, name)
    assert resumed["stage4"]["eval"] == straight["stage4"]["eval"]
    # stage 2 changed only the replaced mixer; stage 1's kept layers are the teacher's
    s1 = load_file(root / "straight" / "stage1" / "final" / "model.safetensors")
    s2 = load_file(root / "straight" / "stage2" / "final" / "model.safetensors")
    moved = {n for n in s1 if not torch.equal(s1[n], s2[n])}
    assert moved and all(n.startswith("model.layers.1.mixer.") for n in moved)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(root / "straight" / "stage4" / "final")
    assert type(loaded).__name__ == "AssocMemForCausalLM"
    assert (root / "straight" / "stage3" / "curves.png").is_file()


# ---------------------------------------------------------------- refusals, before any work
def _refused(cfg: DistillConfig, match: str, tmp_path) -> None:
    with pytest.raises(ConfigError, match=match):
        run_distill(cfg)
    assert not (tmp_path / "runs").exists()  # nothing was written


def test_refusals_name_the_field(tmp_path):
    _, folder = llama(tmp_path)
    _refused(_config(tmp_path, tmp_path / "nowhere"), r"teacher: .*nowhere is not a saved model", tmp_path)
    _refused(_config(tmp_path, folder, student={"mixer": "gdn", "replace": [3]}),
             r"student: replace \[3\] out of range for a teacher with 3 layers", tmp_path)
    _refused(_config(tmp_path, folder, student={"mixer": "gdn", "table_3_3": "50"}),
             r"student: the Table 3.3 set '50' is for a 16-layer teacher", tmp_path)
    _refused(_config(tmp_path, folder, student={"mixer": "softmax", "replace": [1]}), r"student.mixer: 'softmax'",
             tmp_path)
    _, scaled = llama(tmp_path, "scaled", rope_scaling={"rope_type": "linear", "factor": 2.0})
    _refused(_config(tmp_path, scaled), r"^teacher: teacher rope_scaling: rope_type = 'linear'", tmp_path)
    _, biased = llama(tmp_path, "biased", attention_bias=True)
    _refused(_config(tmp_path, biased), r"^teacher: teacher LlamaConfig has q/k/v biases \(attention_bias\)", tmp_path)
    gpt2 = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB)
                                 ).save_pretrained(gpt2)
    _refused(_config(tmp_path, gpt2), r"teacher architectures = \['GPT2LMHeadModel'\]", tmp_path)


def test_unknown_keys_and_rules_are_refused(tmp_path):
    path = tmp_path / "d.yaml"
    base = _config(tmp_path, tmp_path).model_dump(mode="json")
    for change, match in [({"stage3": {**base["stage3"], "tau": 2}}, r"stage3.tau: Extra inputs"),
                          ({"student": {"mixer": "gdn", "replace": [1], "replace_fraction": 0.5}},
                           "exactly one of replace, table_3_3, replace_fraction"),
                          ({"stage3": {**base["stage3"], "direction": "sideways"}}, "stage3.direction")]:
        path.write_text(yaml.safe_dump({**base, **change}))
        with pytest.raises(ConfigError, match=match):
            load_distill_config(path)
    path.write_text(yaml.safe_dump(base))
    assert load_distill_config(path, ["student.replace=[0, 2]"]).student.replace == [0, 2]


# ---------------------------------------------------------------- the command line
def test_cli_refuses_before_work_and_runs_one_stage(tmp_path, capsys):
    from assocmem.cli import main

    _, folder = llama(tmp_path)
    path = tmp_path / "d.yaml"
    data = _config(tmp_path, folder).model_dump(mode="json")
    path.write_text(yaml.safe_dump({**data, "teacher": str(tmp_path / "missing")}))
    assert main(["distill", str(path)]) == 2
    assert "teacher: " in capsys.readouterr().err and not (tmp_path / "runs").exists()
    path.write_text(yaml.safe_dump(data))
    assert main(["distill", str(path), "--stage", "3"]) == 2                  # stage 2 has not run
    assert "--stage 3 starts from" in capsys.readouterr().err
    assert main(["distill", str(path), "--stage", "1"]) == 0
    out, err = capsys.readouterr()
    assert '"stage1"' in out and not (tmp_path / "runs" / "d" / "stage2").exists()
    lines = err.splitlines()  # progress on stderr from the first second: the teacher, then each stage
    assert re.fullmatch(r"distill \([0-9.]+ s\) loading the teacher .+ \.\.\.", lines[0])
    assert "distill [1/1] stage1 (weight transfer) ..." in lines
    assert any(re.match(r"distill \[1/1\] stage1 \(weight transfer\) done in [0-9.]+ s", x) for x in lines)
    assert main(["distill", str(path), "--stage", "1"]) == 0                  # finished: read back, not redone
    assert "distill [1/1] stage1 done; finished before, skipped" in capsys.readouterr().err
    assert main(["distill", str(path), "--set", "student.replace=[2]", "--stage", "1"]) == 2  # another config there
    assert "holds a distillation with another config" in capsys.readouterr().err


def test_out_of_memory_in_a_stage_is_one_line_naming_the_stage_settings(tmp_path, monkeypatch, capsys):
    """An allocation failure injected into stage 2's step 3 (checkpoint at step 2): the line names the
    checkpoint, the stage's own settings as the distill config spells them, and the distill command."""
    from assocmem.cli import main
    from assocmem.training.distill.stages import DistillTrainer

    _, folder = llama(tmp_path)
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, folder).model_dump(mode="json")))
    original = DistillTrainer.train_step

    def step_or_fail(self):
        if self.step + 1 == 3:
            raise MemoryError
        return original(self)

    monkeypatch.setattr(DistillTrainer, "train_step", step_or_fail)
    assert main(["distill", str(path)]) == 1
    err = capsys.readouterr().err
    stage2 = tmp_path / "runs" / "d" / "stage2"
    last = err.strip().splitlines()[-1]  # after the progress lines: one line, no traceback
    assert "Traceback" not in err
    assert last == (f"assocmem distill: out of host memory in step 3 of 6 (MemoryError); saved: checkpoint "
                    f"{stage2 / 'checkpoints' / 'step_00000002'}; lower stage2.train.micro_batch_size (now 8; "
                    f"the global batch stays 8 by gradient accumulation) or stage2.train.eval_batch_size (now 16), "
                    f"then resume with `assocmem distill {path}`")


@pytest.mark.distributed
def test_two_gloo_processes_match_one_process(tmp_path):
    """Stages 2 and 3 under torchrun (DDP over gloo, 2 processes) give the losses of one process."""
    import subprocess

    import numpy as np

    from assocmem.training.runlog import read_log
    from training_helpers import PYTHON, REPO

    _, folder = llama(tmp_path)
    loop = {"steps": 4, "batch_size": 8, "micro_batch_size": 2, "log_every": 1, "eval_batch_size": 16,
            "progress": False, "threads": 1}
    paths = {}
    for name in ("one", "two"):
        data = _config(tmp_path, folder, name=name).model_dump(mode="json")
        data.update(stage2={**data["stage2"], "train": loop}, stage3={**data["stage3"], "train": loop}, stage4=None)
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(data))
    single = subprocess.Popen([PYTHON, "-m", "assocmem.cli", "distill", str(paths["one"])], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pair = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                             "assocmem.cli", "distill", str(paths["two"])], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert pair.wait(timeout=300) == 0, pair.stderr.read()[-3000:]
    assert single.wait(timeout=300) == 0, single.stderr.read()[-3000:]
    for stage in ("stage2", "stage3"):
        one = [r for r in read_log(tmp_path / "runs" / "one" / stage / "log.jsonl") if r["split"] == "train"]
        two = [r for r in read_log(tmp_path / "runs" / "two" / stage / "log.jsonl") if r["split"] == "train"]
        assert [r["step"] for r in two] == [1, 2, 3, 4]
        np.testing.assert_allclose([r["loss"] for r in two], [r["loss"] for r in one], rtol=1e-5, atol=1e-7)
        assert '"world_size": 2' in (tmp_path / "runs" / "two" / stage / "summary.json").read_text()


def test_a_stage3_loss_of_exactly_zero_is_refused(tmp_path):
    base = _config(tmp_path, tmp_path).model_dump(mode="json")
    with pytest.raises(ConfigError, match=r"stage3: .*w_kl and w_ce are both 0, so the loss is exactly 0"):
        load_distill_config_from({**base, "stage3": {**base["stage3"], "w_kl": 0, "w_ce": 0}}, tmp_path)


def load_distill_config_from(data: dict, tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_distill_config(path)


def test_a_distillation_moved_to_another_output_dir_goes_on(tmp_path):
    import shutil

    _, folder = llama(tmp_path)
    cfg = _config(tmp_path, folder)
    run_distill(cfg, stage=1)
    shutil.move(tmp_path / "runs", tmp_path / "moved")
    moved = DistillConfig.model_validate({**cfg.model_dump(mode="json"), "output_dir": str(tmp_path / "moved")})
    assert run_distill(moved, stage=1)["stage1"]["replaced"] == [1]      # read back, not refused, not redone
