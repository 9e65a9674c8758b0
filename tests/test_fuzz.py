"""Fuzz: generated bad configs, specs, command-line values and tensor inputs (issue 18).

Every case is generated from what the code declares (pydantic field types and bounds, argparse
option types, the op contract's shapes), in a fixed order, so the suite is deterministic. Each
must end in a clear error: the expected error type, the field or argument named in the message,
no raw traceback from the command line, and no non-finite or out-of-range value accepted.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
import typing
from typing import Any, Literal

import pytest
import torch
import torch.nn.functional as F
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ValidationError

from assocmem.memories import GD, Huber, Implicit, Lp, Momentum, Proximal, RetainThenGD, Spectral
from assocmem.mixers import MixerSpec, get_preset, list_presets
from assocmem.cli.types import (finite_float, non_negative_float, non_negative_int, positive_float,
                                       positive_int, probability, seed_int)
from assocmem.mixers.layer import build_mixer
from assocmem.mixers.ops import attention, delta, hebbian
from assocmem.mixers.spec import AttentionOptions, LayerOptions, SCAOptions
from assocmem.models import HybridConfig
from assocmem.cli import build_parser
from assocmem.cli import main as cli_main
from assocmem.training.config import (ConfigError, MQARData, OptimConfig, TrainLoopConfig, config_from_dict,
                                      set_values)

BASE_TRAIN = {
    "name": "fuzz", "seed": 0,
    "model": {"hybrid": {"d_model": 32, "layers": "gdn,attn", "num_heads": 2, "mlp_ratio": 0}},
    "data": {"kind": "mqar", "seq_len": 32, "num_kv_pairs": 4, "vocab_size": 64, "num_train": 64, "num_eval": 8},
    "optim": {"lr": 1e-3, "warmup_steps": 0},
    "train": {"steps": 4, "batch_size": 8},
}


# ----------------------------------------------------------------------------- generators
def _core(annotation: Any) -> Any:
    """int / float / bool / str / a Literal / a model class, with Optional stripped."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType")) and len(args) == 1:
        return _core(args[0])
    return annotation


def bad_values(field) -> list[Any]:
    """Out-of-range and ill-typed values for a pydantic field, from its declared type and bounds."""
    core = _core(field.annotation)
    if typing.get_origin(core) is Literal:
        return ["not-a-choice", 3]
    if core is bool:
        return ["maybe"]
    if core not in (int, float):
        return []
    values: list[Any] = ["abc", [1]]
    for bound in field.metadata:
        if isinstance(bound, Gt):
            values += [bound.gt, bound.gt - 1]
        elif isinstance(bound, Ge):
            values += [bound.ge - 1]
        elif isinstance(bound, Lt):
            values += [bound.lt]
        elif isinstance(bound, Le):
            values += [bound.le + 1]
    if core is float:
        values += [math.nan, math.inf, -math.inf]
    else:
        values += [1.5]
    return values


def field_cases(model: type[BaseModel], prefix: str) -> list[tuple[str, str, Any]]:
    """(dotted key, field name, bad value) for every field of ``model`` that declares a type or bound."""
    return [(f"{prefix}.{name}", name, value) for name, field in model.model_fields.items()
            for value in bad_values(field)]


TRAIN_CASES = (field_cases(OptimConfig, "optim") + field_cases(TrainLoopConfig, "train")
               + [c for c in field_cases(MQARData, "data") if c[1] != "kind"])


def _spec_cases() -> list[tuple[str, str, Any]]:
    """Bad values for the numeric fields of every axis that has one, and of LayerOptions."""
    axes = {"bias": [Lp(p=3.0), Huber()], "optimizer": [GD(), RetainThenGD(), Implicit(), Momentum()],
            "retention": [Proximal()], "memory": [Spectral()]}
    cases = []
    for slot, choices in axes.items():
        for axis in choices:
            cases += [(f"{slot}:{axis.kind}", name, value) for _, name, value in field_cases(type(axis), slot)
                      if name != "kind"]
    cases += [("layer", name, value) for _, name, value in field_cases(LayerOptions, "layer")]
    for sub, model in (("attention", AttentionOptions), ("sca", SCAOptions)):  # LayerOptions' sub-models
        cases += [(f"layer.{sub}", name, value) for _, name, value in field_cases(model, sub)]
    return cases


SPEC_CASES = _spec_cases()
HYBRID_CASES = [c for c in field_cases(HybridConfig, "hybrid") if c[1] not in ("name", "form")]


def _ids(cases):
    return [f"{key}={value!r}"[:60] for key, _, value in cases]


def test_the_generators_cover_more_than_a_hundred_cases():
    assert len(TRAIN_CASES) + len(SPEC_CASES) + len(HYBRID_CASES) + len(CLI_CASES) + len(TENSOR_CASES) >= 300


# ----------------------------------------------------------------------------- configs
@pytest.mark.parametrize("key,name,value", TRAIN_CASES, ids=_ids(TRAIN_CASES))
def test_bad_train_config_values_are_refused_naming_the_field(key, name, value):
    raw = set_values(BASE_TRAIN, {key: value})
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    assert name in str(err.value), str(err.value)


@pytest.mark.parametrize("key,name,value", HYBRID_CASES, ids=_ids(HYBRID_CASES))
def test_bad_hybrid_config_values_are_refused_naming_the_field(key, name, value):
    with pytest.raises(ValidationError) as err:
        HybridConfig.model_validate({"d_model": 32, "vocab_size": 64, "layers": "gdn,attn", "num_heads": 2,
                                     name: value})
    assert name in str(err.value), str(err.value)


@pytest.mark.parametrize("where,name,value", SPEC_CASES, ids=_ids(SPEC_CASES))
def test_bad_spec_values_are_refused_naming_the_field(where, name, value):
    data = get_preset("gated_deltanet").model_dump(mode="json")
    with pytest.raises(ValidationError) as err:
        MixerSpec.model_validate(_bad_spec(where, name, value))
    assert name in str(err.value), str(err.value)


def _bad_spec(where: str, name: str, value: Any) -> dict:
    """The gated_deltanet preset as a dict with ``name`` set to ``value`` in the slot ``where``
    ('bias:lp' = a bias of kind lp, 'layer' = LayerOptions, 'layer.sca' = its sca sub-model)."""
    data = get_preset("gated_deltanet").model_dump(mode="json")
    slot, _, kind = where.partition(":")
    slot, _, sub = slot.partition(".")
    if kind:
        data[slot] = {"kind": kind, name: value}
    elif sub:
        data[slot] = {**data[slot], sub: {**data[slot][sub], name: value}}
    else:
        data[slot] = {**data[slot], name: value}
    return data


@pytest.mark.parametrize("where,name,value", SPEC_CASES[::4], ids=_ids(SPEC_CASES[::4]))
def test_derive_on_a_bad_spec_file_exits_with_a_message_naming_the_field(tmp_path, where, name, value):
    """Every fourth generated spec case, written as a YAML file and given to ``assocmem derive``
    (before: a raw pydantic traceback)."""
    import yaml

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_bad_spec(where, name, value)))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli_main(["derive", str(path)])
    message = str(exit_.value.code)
    assert message.startswith(f"derive: {path} is not a valid MixerSpec") and name in message, message
    assert "Traceback" not in err.getvalue()


def test_derive_on_invalid_yaml_exits_with_a_message(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("memory: [\n")
    with pytest.raises(SystemExit) as exit_:
        cli_main(["derive", str(path)])
    assert str(exit_.value.code).startswith(f"derive: {path} is not a valid MixerSpec")


# ----------------------------------------------------------------------------- command line
BAD_TEXT = {positive_int: ["0", "-5", "1.5", "abc"], non_negative_int: ["-1", "x"],
            finite_float: ["nan", "inf"], positive_float: ["0", "-1e-3", "nan", "-inf"],
            non_negative_float: ["-0.5", "nan"], seed_int: ["-1", str(2**32), "1e3"],
            probability: ["0", "1.5", "nan", "-0.1"]}


def _options(parser: argparse.ArgumentParser, path: list[str]):
    """(command path, option string, type) of every option typed with a cli_types function, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, path + [name])
        elif action.option_strings and action.type in BAD_TEXT:
            yield path, action.option_strings[-1], action.type


def _cli_cases():
    seen, cases = set(), []
    for path, flag, kind in _options(build_parser(), []):
        if (tuple(path), flag) in seen:
            continue
        seen.add((tuple(path), flag))
        cases += [(path, flag, text) for text in BAD_TEXT[kind]]
    return cases


CLI_CASES = _cli_cases()


@pytest.mark.parametrize("path,flag,text", CLI_CASES, ids=[f"{' '.join(p)} {f}={t}" for p, f, t in CLI_CASES])
def test_bad_command_line_numbers_are_refused_naming_the_flag(path, flag, text):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli_main([*path, f"{flag}={text}"])
    assert exit_.value.code == 2
    assert f"argument {flag}" in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()


def test_the_command_line_cases_reach_every_command():
    commands = {p[0] for p, _, _ in CLI_CASES}
    assert {"verify", "bench", "probe", "eval"} <= commands, commands


@pytest.mark.parametrize("override", [".nan", ".inf", "-1", "0", "abc"])
def test_bad_set_values_exit_with_a_message(tmp_path, override, capsys):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE_TRAIN, "output_dir": str(tmp_path / "runs")}))
    assert cli_main(["train", str(path), "--set", f"optim.lr={override}"]) == 2
    err = capsys.readouterr().err
    assert "optim.lr" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- tensors
def _valid_case(kind: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 2, 9, 2, 4, 6
    x = {"q": torch.randn(B, T, H, K, generator=g), "k": F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1),
         "v": torch.randn(B, T, H, V, generator=g)}
    if kind != "attention":
        x.update(log_alpha=-torch.rand(B, T, H, generator=g), beta=torch.rand(B, T, H, generator=g),
                 initial_state=torch.randn(B, H, K, V, generator=g))
    return x


TENSOR_OPS = {"chunk_delta_rule": (delta.chunk_delta_rule, "matrix"),
              "recurrent_delta_rule": (delta.recurrent_delta_rule, "matrix"),
              "chunk_kda": (delta.chunk_kda, "matrix"),
              "chunk_hebbian": (hebbian.chunk_hebbian, "matrix"),
              "sdpa_softmax_attention": (attention.sdpa_softmax_attention, "attention")}


def _mutations(x: dict[str, torch.Tensor]):
    """One argument made wrong at a time: an extra axis, each axis one longer, an integer dtype, a list."""
    for name, t in x.items():
        yield name, "rank", t[None]
        for axis in range(t.dim()):
            yield name, f"axis{axis}", torch.cat([t, t.narrow(axis, 0, 1)], dim=axis)
        yield name, "dtype", t.to(torch.int64)
        yield name, "type", t.tolist()


VALID_MUTATIONS = {("attention", "v", "axis3")}  # attention's value width is free (no state fixes it)
TENSOR_CASES = [(op, name, what) for op, (_, kind) in TENSOR_OPS.items()
                for name, what, _ in _mutations(_valid_case(kind)) if (kind, name, what) not in VALID_MUTATIONS]


@pytest.mark.parametrize("op,name,what", TENSOR_CASES, ids=[f"{o}-{n}-{w}" for o, n, w in TENSOR_CASES])
def test_bad_tensor_inputs_are_refused_naming_the_argument(op, name, what):
    fn, kind = TENSOR_OPS[op]
    x = _valid_case(kind)
    x[name] = next(bad for n, w, bad in _mutations(x) if (n, w) == (name, what))
    with pytest.raises((ValueError, TypeError)) as err:
        fn(**x)
    message = str(err.value)
    # the argument (or the one it disagrees with: v's width is checked against initial_state), the expected
    # layout and what was received
    named = any(re.search(rf"\b{n}\b", message) for n in x)
    assert named and "[" in message and "got" in message, message


# ----------------------------------------------------------------------------- mixer modules and the model
def _x_mutations(x: torch.Tensor):
    """Wrong module inputs made from a valid x [B, T, d]: each rank change, a wrong width, no tokens,
    an integer dtype, a list."""
    yield "rank2", x[0]
    yield "rank4", x[None]
    yield "width", x[..., :-1]
    yield "no_tokens", x[:, :0]
    yield "dtype", x.to(torch.int64)
    yield "type", x.tolist()


MODULE_CASES = [(name, what) for name in list_presets() for what, _ in _x_mutations(torch.zeros(2, 3, 16))]


@pytest.mark.parametrize("name,what", MODULE_CASES, ids=[f"{n}-{w}" for n, w in MODULE_CASES])
def test_bad_module_inputs_are_refused_naming_x_and_its_shape(name, what):
    """Before: 'not enough values to unpack' or a matmul shape error from inside the module."""
    layer = build_mixer(get_preset(name), 16)
    x = torch.randn(2, 5, 16)
    bad = dict(_x_mutations(x))[what]
    with pytest.raises((ValueError, TypeError)) as err:
        layer(bad)
    message = str(err.value)
    assert "x must" in message and "[B, T, d_model=16]" in message and "got" in message, message


@pytest.mark.parametrize("name", list_presets())
def test_an_empty_batch_gives_empty_outputs_and_gradients(name):
    """Before: B = 0 crashed gdn, mamba2 and gla inside their chunk forms."""
    torch.manual_seed(0)
    layer = build_mixer(get_preset(name), 16)
    x = torch.randn(0, 7, 16, requires_grad=True)
    y, _ = layer(x)
    assert y.shape == (0, 7, 16)
    y.sum().backward()
    assert x.grad is None or x.grad.shape == (0, 7, 16)  # (an empty output may leave x out of the graph)
    assert all(p.grad is None or bool((p.grad == 0).all()) for p in layer.parameters())


def test_the_attention_mask_is_checked_at_the_module_boundary():
    layer = build_mixer(get_preset("softmax"), 16)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"Attention: mask must have shape \[B, T\] = \[2, 5\] .*got \[2, 4\]"):
        layer(x, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"Attention: mask must be a bool tensor \[B, T\]"):
        layer(x, mask=torch.ones(2, 5))


def test_the_model_refuses_bad_ids_and_runs_an_empty_batch():
    from assocmem.models import build_model

    torch.manual_seed(0)
    model = build_model({"d_model": 16, "vocab_size": 32, "layers": "gdn,mamba2,gla,attn", "num_heads": 2})
    for bad in (torch.zeros(5, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 5)):
        with pytest.raises(ValueError, match=r"input_ids must be an integer tensor \[B, T\] with T >= 1"):
            model(bad)
    with torch.no_grad():
        logits = model(torch.zeros(0, 6, dtype=torch.long)).logits
    assert logits.shape == (0, 6, 32)


# ============================================================================= the newer surfaces (issue 35)
# distill, rl, probes, experiments, data files and YAML configs, each bad input given to the command line
# in-process (``cli_main(argv)``); every case must exit 2 with a message naming the field, flag, file or line,
# and nothing may escape as an exception (a traceback from the console script).
def _refused(argv: list[str], *named: str, code: int = 2) -> str:
    """Run ``assocmem ARGV`` in this process: it must exit ``code`` (returned or raised) with stderr naming
    every string of ``named``; returns stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli_main(argv)
        except SystemExit as exit_:
            rc = exit_.code
    message = err.getvalue()
    assert rc == code, f"exit {rc!r} for {argv}: {message}"
    assert "Traceback" not in message, message
    missing = [n for n in named if n not in message]
    assert not missing, f"{missing} not named in: {message}"
    return message


def _yaml_word(value: Any) -> str:
    """``value`` as the YAML text of one ``--set`` value."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()


def _write_yaml(path, data: dict):
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


RL_BASE = {"name": "fuzz-rl", "model": {"hybrid": {"d_model": 16, "layers": "gdn", "num_heads": 2, "mlp_ratio": 0}},
           "data": {"kind": "chain_sum", "num_digits": 2, "num_train": 8, "num_eval": 4}, "train": {"steps": 1}}
STAGE = {"train": {"steps": 1, "batch_size": 2}}
DISTILL_BASE = {"name": "fuzz-distill", "teacher": "teacher", "student": {"replace": [0]},
                "data": {"kind": "chain_sum", "num_digits": 2, "num_train": 8, "num_eval": 4},
                "stage2": STAGE, "stage3": STAGE, "stage4": STAGE}
SEED_VALUES = [-1, 2**32, 1.5, "abc"]


def _rl_cases() -> list[tuple[str, str, Any]]:
    from assocmem.training.rl.config import LossConfig, Mastered, RLLoopConfig, RolloutConfig

    return (field_cases(RolloutConfig, "rollout") + field_cases(LossConfig, "loss")
            + field_cases(RLLoopConfig, "train") + field_cases(Mastered, "rollout.mastered")
            + field_cases(OptimConfig, "optim") + [("seed", "seed", v) for v in SEED_VALUES])


def _distill_cases() -> list[tuple[str, str, Any]]:
    from assocmem.training.distill.config import AlignStage, KDStage, StudentConfig

    own = lambda model, prefix: [c for c in field_cases(model, prefix) if c[1] not in ("optim", "train")]  # noqa: E731
    return (own(StudentConfig, "student") + own(AlignStage, "stage2") + own(KDStage, "stage3")
            + field_cases(TrainLoopConfig, "stage2.train") + field_cases(OptimConfig, "stage3.optim")
            + [("seed", "seed", v) for v in SEED_VALUES])


def _train_seed_cases() -> list[tuple[str, str, Any]]:
    """Every seed of a training config: the loop's and the data's (numpy refuses a negative one, or one from 2**32)."""
    return [(key, key.rpartition(".")[2], v) for key in ("seed", "data.seed", "data.eval_seed") for v in SEED_VALUES]


RL_CASES = _rl_cases()
TRAIN_SEED_CASES = _train_seed_cases()
DISTILL_CASES = _distill_cases()


@pytest.mark.parametrize("key,name,value", RL_CASES, ids=_ids(RL_CASES))
def test_rl_refuses_a_bad_set_value_naming_the_field(tmp_path, key, name, value):
    config = _write_yaml(tmp_path / "rl.yaml", {**RL_BASE, "output_dir": str(tmp_path / "runs")})
    _refused(["rl", str(config), "--set", f"{key}={_yaml_word(value)}", "--print-config"], key)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("key,name,value", DISTILL_CASES, ids=_ids(DISTILL_CASES))
def test_distill_refuses_a_bad_set_value_naming_the_field(tmp_path, key, name, value):
    config = _write_yaml(tmp_path / "d.yaml", {**DISTILL_BASE, "output_dir": str(tmp_path / "runs")})
    _refused(["distill", str(config), "--set", f"{key}={_yaml_word(value)}", "--print-config"], key)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("key,name,value", TRAIN_SEED_CASES, ids=_ids(TRAIN_SEED_CASES))
def test_train_refuses_a_seed_numpy_cannot_take_naming_it(tmp_path, key, name, value):
    """Before: -1 or 2**32 passed validation and failed in the loop with numpy's "Seed must be between 0 and
    2**32 - 1", naming no seed."""
    config = _write_yaml(tmp_path / "t.yaml", {**BASE_TRAIN, "output_dir": str(tmp_path / "runs")})
    _refused(["train", str(config), "--set", f"{key}={_yaml_word(value)}", "--print-config"], name)
    assert not (tmp_path / "runs").exists()


# YAML that is refused whatever the config: (label, text of the file or of a --set value, what the message names)
BAD_YAML = [
    ("duplicate-key", "seed: 0\nseed: 1\n", "appears twice"),
    ("python-tag", "seed: !!python/object/apply:os.system ['true']\n", "tag"),
    ("custom-tag", "seed: !include other.yaml\n", "tag"),
    ("alias-bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                   "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     "alias"),
    ("deep", "a: " + "[" * 200 + "]" * 200 + "\n", "deeper"),
    ("syntax", "seed: [0\n", "line"),
    ("unclosed-quote", "name: 'fuzz\n", "line"),
    ("tab-indent", "train:\n\tsteps: 1\n", "line"),
    ("list", "- 1\n- 2\n", "mapping"),
    ("scalar", "just text\n", "mapping"),
    ("empty", "", "mapping"),
]
CONFIG_COMMANDS = ["train", "rl", "distill"]
YAML_FILE_CASES = [(command, *case) for command in CONFIG_COMMANDS for case in BAD_YAML]


@pytest.mark.parametrize("command,label,text,what", YAML_FILE_CASES,
                         ids=[f"{c}-{label}" for c, label, _, _ in YAML_FILE_CASES])
def test_a_bad_yaml_config_file_is_refused_naming_the_file(tmp_path, command, label, text, what):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    _refused([command, str(config)], str(config), what)


BINARY_CONFIGS = [("nul", b"seed: 0\n\x00\x01\x02"), ("latin-1", "name: caf\xe9\n".encode("latin-1")),
                  ("utf-16", "seed: 0\n".encode("utf-16"))]
BINARY_CONFIG_CASES = [(command, label, data) for command in CONFIG_COMMANDS for label, data in BINARY_CONFIGS]


@pytest.mark.parametrize("command,label,data", BINARY_CONFIG_CASES,
                         ids=[f"{c}-{label}" for c, label, _ in BINARY_CONFIG_CASES])
def test_a_config_file_that_is_not_utf8_text_is_refused_naming_it(tmp_path, command, label, data):
    config = tmp_path / "c.yaml"
    config.write_bytes(data)
    _refused([command, str(config)], str(config))


BAD_SET_TEXT = [("syntax", "[1, 2", "line"), ("mapping-syntax", "{a: 1", "line"),
                ("python-tag", "!!python/name:os.system", "tag"), ("custom-tag", "!env HOME", "tag"),
                ("undefined-alias", "*nowhere", "alias"), ("nested-mapping", "a: b: c", "line"),
                ("recursive-alias", "&a [*a]", "alias")]
SET_CASES = [(command, *case) for command in CONFIG_COMMANDS for case in BAD_SET_TEXT]
SET_BASES = {"train": BASE_TRAIN, "rl": RL_BASE, "distill": DISTILL_BASE}


@pytest.mark.parametrize("command,label,text,what", SET_CASES, ids=[f"{c}-{label}" for c, label, _, _ in SET_CASES])
def test_a_set_value_that_is_bad_yaml_is_refused_naming_the_key(tmp_path, command, label, text, what):
    config = _write_yaml(tmp_path / "c.yaml", {**SET_BASES[command], "output_dir": str(tmp_path / "runs")})
    _refused([command, str(config), "--set", f"seed={text}", "--print-config"], "--set seed", what)
    assert not (tmp_path / "runs").exists()


BAD_SET_KEYS = [("no-equals", "seed", "key=value"), ("empty-key", "=1", "empty key"),
                ("bad-index", "model.hybrid.layers[x]=1", "layers[x]"), ("unknown", "nonsense=1", "nonsense"),
                ("through-a-value", "seed.deeper=1", "seed")]
SET_KEY_CASES = [(command, *case) for command in CONFIG_COMMANDS for case in BAD_SET_KEYS]


@pytest.mark.parametrize("command,label,item,what", SET_KEY_CASES,
                         ids=[f"{c}-{label}" for c, label, _, _ in SET_KEY_CASES])
def test_a_bad_set_key_is_refused_naming_it(tmp_path, command, label, item, what):
    config = _write_yaml(tmp_path / "c.yaml", {**SET_BASES[command], "output_dir": str(tmp_path / "runs")})
    _refused([command, str(config), "--set", item, "--print-config"], what)
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- experiments
def _experiment_parsers() -> dict[str, argparse.ArgumentParser]:
    experiment = next(a for a in build_parser("experiment")._actions if isinstance(a, argparse._SubParsersAction))
    group = experiment.choices["experiment"]
    return next(a for a in group._actions if isinstance(a, argparse._SubParsersAction)).choices


EXPERIMENTS = _experiment_parsers()


def test_every_number_an_experiment_takes_is_typed_and_range_checked():
    """The command-line cases above reach every experiment flag that takes a number (before: --epochs 0,
    --eval-every 0 (ZeroDivisionError), --jobs 0, --patience 0 (stopped at the first evaluation), --threads 0
    (silently the config's) and --seeds -1 were accepted by a plain int)."""
    untyped = [f"{name} {a.option_strings[-1]}" for name, p in EXPERIMENTS.items() for a in p._actions
               if a.option_strings and a.type in (int, float)]
    assert not untyped, untyped
    covered = {p[1] for p, _, _ in CLI_CASES if p[0] == "experiment"}
    assert covered == set(EXPERIMENTS), set(EXPERIMENTS) - covered


def _frame_cases(tmp_path) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """What every experiment refuses before any work: label -> (flags, what the message names)."""
    (tmp_path / "file").write_text("")
    return {"repeated-seeds": (["--seeds", "3", "1", "3"], ("--seeds", "[3] given more than once")),
            "result-is-a-folder": (["--result", str(tmp_path)], ("--result", "is a folder")),
            "result-through-a-file": (["--result", str(tmp_path / "file" / "r.json")], ("--result", "is a file")),
            "result-exists": (["--result", str(tmp_path / "file")], ("--result", "exists")),
            "no-out": ([], ("--out",))}


FRAME_CASES = [(name, label) for name in EXPERIMENTS for label in
               ("repeated-seeds", "result-is-a-folder", "result-through-a-file", "result-exists", "no-out")]


@pytest.mark.parametrize("name,label", FRAME_CASES, ids=[f"{n}-{label}" for n, label in FRAME_CASES])
def test_an_experiment_refuses_seeds_and_result_paths_before_any_work(tmp_path, name, label):
    """Before: a --result through a file failed after the runs with a NotADirectoryError traceback."""
    flags, named = _frame_cases(tmp_path)[label]
    out = [] if label == "no-out" else ["--out", str(tmp_path / "o")]
    _refused(["experiment", name, *flags, *out], *named)
    assert not (tmp_path / "o").exists()


def _experiment_inputs(tmp_path, write: bool = True) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """Bad files and settings each experiment reads before its runs: label -> (argv tail, what is named)."""
    files = {"empty.txt": b"", "binary.txt": b"ab\x00\x01", "latin1.txt": "caf\xe9\n".encode("latin-1"),
             "bad.yaml": b"d_model: [\n", "negative.yaml": b"d_model: -3\n", "list.yaml": b"- 1\n",
             "unknown.yaml": b"no_such_field: 1\n", "bad.json": b'{"mu":', "tag.yaml": b"steps: !!python/none\n"}
    for name, data in files.items() if write else ():
        (tmp_path / name).write_bytes(data)
    t = lambda name: f"{tmp_path}/{name}"  # noqa: E731
    return {
        "leak-text-missing": (["leak", "--text", t("missing.txt")], ("--text", "missing.txt")),
        "leak-text-empty": (["leak", "--text", t("empty.txt")], (t("empty.txt"), "empty")),
        "leak-text-binary": (["leak", "--text", t("binary.txt")], (t("binary.txt"), "line 1")),
        "leak-text-latin1": (["leak", "--text", t("latin1.txt")], (t("latin1.txt"), "UTF-8")),
        "leak-procedural-chars-few": (["leak", "--procedural-chars", "100"], ("--procedural-chars", "1024")),
        "hybrid-config-missing": (["hybrid", "--config", t("missing.yaml")], ("--config", "missing.yaml")),
        "hybrid-config-syntax": (["hybrid", "--config", t("bad.yaml")], (t("bad.yaml"), "line")),
        "hybrid-config-negative": (["hybrid", "--config", t("negative.yaml")], ("d_model", "greater than 0")),
        "hybrid-config-list": (["hybrid", "--config", t("list.yaml")], (t("list.yaml"), "mapping")),
        "hybrid-config-unknown": (["hybrid", "--config", t("unknown.yaml")], ("no_such_field",)),
        "hybrid-config-tag": (["hybrid", "--config", t("tag.yaml")], (t("tag.yaml"), "tag")),
        "wiola-claims-mu-missing": (["wiola-claims", "--mu-from", t("missing.json")], ("missing.json",)),
        "wiola-claims-mu-malformed": (["wiola-claims", "--mu-from", t("bad.json")], (t("bad.json"),)),
        "wiola-claims-mu-empty": (["wiola-claims", "--mu-from", t("empty.txt")], (t("empty.txt"),)),
        "grokking-modes-beyond-p": (["grokking", "--p", "7", "--variants", "pfft_wrong_high"],
                                    ("--p 7 --variants pfft_wrong_high", "0..3")),
        "grokking-p-1": (["grokking", "--p", "1", "--variants", "baseline"], ("--p 1", "p")),
        "grokking-epochs-within-warmup": (["grokking", "--epochs", "5"], ("--epochs 5", "warm-up")),
        "rl-beta-with-self-distillation": (["rl", "--beta", "0.1"], ("self-distillation", "--methods")),
    }


EXPERIMENT_INPUT_CASES = list(_experiment_inputs(None, write=False))


@pytest.mark.parametrize("label", EXPERIMENT_INPUT_CASES)
def test_an_experiment_refuses_a_bad_input_file_or_setting_naming_it(tmp_path, label):
    """Before: a bad --text failed in the worker processes after the output folder was made (40 s each)."""
    argv, named = _experiment_inputs(tmp_path)[label]
    _refused(["experiment", *argv, "--out", str(tmp_path / "o")], *named)


# ----------------------------------------------------------------------------- probes
@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A saved 1-layer GDN model (vocabulary 160: chain_sum's 14 ids, the needle task's 129, a 16-node graph)."""
    from assocmem.models import build_model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("fuzz-model") / "model"
    build_model({"d_model": 16, "vocab_size": 160, "layers": "gdn", "num_heads": 2, "mlp_ratio": 0}).save_pretrained(path)
    return path


def _probe_inputs(tmp_path, write: bool = True) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """Bad probe inputs that pass the parser: label -> (argv after ``probe``, with {M} for the model; what the
    message names)."""
    files = {"empty.txt": b"", "binary.txt": b"ab\x00\x01" * 20, "latin1.txt": "caf\xe9 ".encode("latin-1") * 20,
             "data.yaml": b"data: {kind: chain_sum, num_digits: 2, num_train: 8, num_eval: 4}\n"}
    for name, data in files.items() if write else ():
        (tmp_path / name).write_bytes(data)
    t = lambda name: f"{tmp_path}/{name}"  # noqa: E731
    chain = ["--task", "chain_sum", "--num-problems", "2", "--samples", "2"]
    needle = ["--lengths", "16", "--trials", "1"]
    return {
        "tts-k-above-n": (["tts", "{M}", *chain, "--ks", "8"], ("--ks 8 > --samples 2",)),
        "tts-unknown-task": (["tts", "{M}", "--task", "bogus"], ("'bogus'", "chain_sum")),
        "tts-task-param-without-task": (["tts", "{M}", "--task-param", "num_digits=3"],
                                        ("--task-param num_digits=3", "--task")),
        "tts-task-param-no-equals": (["tts", "{M}", *chain, "--task-param", "num_digits"], ("key=value",)),
        "tts-task-param-unknown": (["tts", "{M}", *chain, "--task-param", "bogus=1"], ("bogus",)),
        "tts-task-param-not-a-number": (["tts", "{M}", *chain, "--task-param", "num_digits=abc"], ("num_digits",)),
        "tts-task-param-bad-yaml": (["tts", "{M}", *chain, "--task-param", "num_digits=[1"],
                                    ("--task-param num_digits", "line")),
        "tts-task-param-tag": (["tts", "{M}", *chain, "--task-param", "num_digits=!!python/none x"],
                               ("--task-param num_digits", "tag")),
        "tts-no-task": (["tts", "{M}"], ("--task", "--problems-file")),
        "tts-missing-model": (["tts", t("no-model"), *chain], (t("no-model"),)),
        "tts-template-without-prompt": (["tts", "{M}", "--problems-file", t("empty.txt"), "--prompt-template", "Q:"],
                                        ("{prompt}",)),
        "tts-missing-tokenizer": (["tts", "{M}", "--problems-file", t("empty.txt"), "--tokenizer", t("no-tok")],
                                  ("tokenizer", t("no-tok"))),
        "niah-depth-above-100": (["niah", "{M}", *needle, "--depths", "150"], ("--depths", "150")),
        "niah-depth-negative": (["niah", "{M}", *needle, "--depths", "-10"], ("--depths", "-10")),
        "niah-task-param-unknown": (["niah", "{M}", *needle, "--task-param", "bogus=1"], ("bogus",)),
        "niah-task-param-zero-needles": (["niah", "{M}", *needle, "--task-param", "num_needles=0"], ("num_needles",)),
        "niah-task-param-no-equals": (["niah", "{M}", *needle, "--task-param", "num_needles"], ("key=value",)),
        "niah-text-missing": (["niah", "{M}", *needle, "--text", t("missing.txt")], ("--text", t("missing.txt"))),
        "niah-text-empty": (["niah", "{M}", *needle, "--text", t("empty.txt")], (t("empty.txt"), "empty")),
        "niah-text-binary": (["niah", "{M}", *needle, "--text", t("binary.txt")], (t("binary.txt"), "line 1")),
        "niah-text-latin1": (["niah", "{M}", *needle, "--text", t("latin1.txt")], (t("latin1.txt"), "UTF-8")),
        "sounding-axis": (["sounding", "{M}", "--data", t("data.yaml"), "--axis", "7"], ("axis 7",)),
        "sounding-params": (["sounding", "{M}", "--data", t("data.yaml"), "--params", "nomatch*"],
                            ("--params", "nomatch*")),
        "sounding-top-k": (["sounding", "{M}", "--data", t("data.yaml"), "--top-k", "1000"], ("--top-k 1000",)),
        "sounding-length": (["sounding", "{M}", "--data", t("data.yaml"), "--length", "100000"], ("100000",)),
        "sounding-data-missing": (["sounding", "{M}", "--data", t("missing.yaml")], ("--data", t("missing.yaml"))),
        "sounding-no-data": (["sounding", "{M}"], ("--data",)),
        "sounding-set-no-equals": (["sounding", "{M}", "--data", t("data.yaml"), "--set", "nokey"], ("--set nokey",)),
        "sounding-set-model-field": (["sounding", "{M}", "--data", t("data.yaml"), "--set", "seed=3"],
                                     ("--set seed=3", "data")),
        "sounding-set-bad-data-value": (["sounding", "{M}", "--data", t("data.yaml"), "--set", "data.num_digits=abc"],
                                        ("data.num_digits",)),
        "capacity-unknown-spec": (["capacity", "bogus_spec"], ("'bogus_spec'",)),
        "capacity-binary-spec-file": (["capacity", t("binary.txt")], (t("binary.txt"),)),
        "capacity-unknown-form": (["capacity", "gated_deltanet", "--form", "bogus"], ("'bogus'", "chunk")),
        "capacity-too-many-pairs": (["capacity", "gated_deltanet", "--num-pairs", str(10**12), "--trials", "1"],
                                    (f"num_pairs {10**12}", "memory")),
        "causality-unknown-target": (["causality", "bogus_spec"], ("'bogus_spec'",)),
        "causality-binary-target": (["causality", t("binary.txt")], (t("binary.txt"),)),
        "recall-unknown-mixer": (["recall", "--train-mixers", "bogus", "--steps", "1"], ("'bogus'",)),
        "recall-missing-model": (["recall", "--models", t("no-model")], (t("no-model"),)),
        "recall-k-beyond-length": (["recall", "--models", "{M}", "--num-kv-pairs", "100"],
                                   ("--num-kv-pairs 100", "seq_len")),
        "graph-tracing-missing-model": (["graph-tracing", t("no-model"), "--walks", "1"], (t("no-model"),)),
    }


PROBE_INPUT_CASES = list(_probe_inputs(None, write=False))


@pytest.mark.parametrize("label", PROBE_INPUT_CASES)
def test_a_probe_refuses_a_bad_input_naming_it_before_writing(tmp_path, saved_model, label):
    """Before: a --task-param without --task, or a sounding --set of a field other than data's, was ignored;
    --top-p 1.5 a pydantic dump; a non-UTF-8 --text a bare codec error; too many capacity pairs an allocation
    traceback."""
    argv, named = _probe_inputs(tmp_path)[label]
    argv = [str(saved_model) if a == "{M}" else a for a in argv]
    _refused(["probe", *argv, "--out", str(tmp_path / "o")], *named)
    assert not (tmp_path / "o").exists()


def _choice_cases() -> list[tuple[list[str], str]]:
    """(command path, option) of every option with choices, for every probe and experiment and distill."""
    cases = []
    for path, parser in [(["probe"], None), (["experiment"], None), (["distill"], None)]:
        root = build_parser(path[0])
        for action in root._actions:
            if isinstance(action, argparse._SubParsersAction):
                command = action.choices[path[0]]
                subs = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
                parsers = subs[0].choices.items() if subs else [(None, command)]
                for name, p in parsers:
                    cases += [([*path, name] if name else path, a.option_strings[-1]) for a in p._actions
                              if a.option_strings and a.choices]
    return cases


CHOICE_CASES = _choice_cases()


@pytest.mark.parametrize("path,flag", CHOICE_CASES, ids=[f"{' '.join(p)} {f}" for p, f in CHOICE_CASES])
def test_a_value_that_is_not_a_choice_is_refused_naming_the_flag(path, flag):
    _refused([*path, flag, "not-a-choice"], f"argument {flag}", "'not-a-choice'")


# ----------------------------------------------------------------------------- data files
def _parquet(columns: dict) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


GOOD_RECORD = b'{"question": "1+1", "answer": "2"}\n'
# label -> (suffix, bytes, what the message names besides the file); the records have question/answer fields
BAD_DATA_FILES = {
    "jsonl-empty": (".jsonl", lambda: b"", "empty"),
    "jsonl-blank-lines": (".jsonl", lambda: b"\n\n  \n", "line"),
    "jsonl-nul": (".jsonl", lambda: GOOD_RECORD + b"\x00\x01\n", "line 2"),
    "jsonl-latin1": (".jsonl", lambda: GOOD_RECORD + '{"question": "caf\xe9"}\n'.encode("latin-1"), "line 2"),
    "jsonl-utf16": (".jsonl", lambda: GOOD_RECORD.decode().encode("utf-16"), "line 1"),
    "jsonl-malformed-line": (".jsonl", lambda: GOOD_RECORD + b'{"question": \n', "line 2"),
    "jsonl-number-line": (".jsonl", lambda: GOOD_RECORD + b"5\n", "line 2"),
    "jsonl-list-line": (".jsonl", lambda: GOOD_RECORD + b'["a", "b"]\n', "line 2"),
    "jsonl-question-number": (".jsonl", lambda: b'{"question": 5, "answer": "2"}\n', "question"),
    "jsonl-question-null": (".jsonl", lambda: b'{"question": null, "answer": "2"}\n', "question"),
    "jsonl-question-list": (".jsonl", lambda: b'{"question": ["1+1"], "answer": "2"}\n', "question"),
    "jsonl-question-missing": (".jsonl", lambda: b'{"q": "1+1", "answer": "2"}\n', "question"),
    "jsonl-mixed-types": (".jsonl", lambda: GOOD_RECORD + b'{"question": 7, "answer": "2"}\n', "question"),
    "json-truncated": (".json", lambda: b'[{"question": "1+1", "answer": "2"}', "line 1"),
    "json-list-of-numbers": (".json", lambda: b"[1, 2, 3]", "record 0"),
    "json-empty-list": (".json", lambda: b"[]", "no record"),
    "json-string": (".json", lambda: b'"just a string"', "record 0"),
    "parquet-empty-file": (".parquet", lambda: b"", "empty"),
    "parquet-not-parquet": (".parquet", lambda: b"PAR1 this is not parquet", "parquet"),
    "parquet-question-missing": (".parquet", lambda: _parquet({"q": ["1+1"], "answer": ["2"]}), "question"),
    "parquet-question-int": (".parquet", lambda: _parquet({"question": [5], "answer": ["2"]}), "question"),
    "parquet-no-rows": (".parquet", lambda: _parquet({"question": pa_strings([]), "answer": pa_strings([])}),
                        "no record"),
    "csv-suffix": (".csv", lambda: b"question,answer\n1+1,2\n", ".csv"),
}


def pa_strings(values):
    import pyarrow as pa

    return pa.array(values, type=pa.string())


TEXT_FILES = {  # plain text data files (sample_by document)
    "txt-empty": (".txt", lambda: b"", "empty"),
    "txt-nul": (".txt", lambda: b"some text\n\x00binary\n", "line 2"),
    "txt-latin1": (".txt", lambda: "caf\xe9\n".encode("latin-1"), "line 1"),
    "txt-utf16": (".txt", lambda: "text\n".encode("utf-16"), "line 1"),
}


def _data_file(tmp_path, label: str):
    suffix, make, what = {**BAD_DATA_FILES, **TEXT_FILES}[label]
    path = tmp_path / f"data{suffix}"
    path.write_bytes(make())
    return path, what


def _train_files_config(tmp_path, path, **data) -> "Any":
    return _write_yaml(tmp_path / "t.yaml", {**BASE_TRAIN, "output_dir": str(tmp_path / "runs"),
                                            "data": {"kind": "files", "train_files": [str(path)], "seq_len": 16,
                                                     **data}})


DATA_SURFACES = {
    # packed text from the question column
    "train-text-field": lambda tmp_path, path: ["train", str(_train_files_config(tmp_path, path, text_field="question"))],
    # prompt/response rows
    "train-prompt-response": lambda tmp_path, path: ["train", str(_train_files_config(
        tmp_path, path, prompt_field="question", response_field="answer", seq_len=32))],
    # a problems file of the test-time scaling probe (byte tokenizer)
    "tts-problems-file": lambda tmp_path, path: ["probe", "tts", "{M}", "--problems-file", str(path),
                                                 "--num-problems", "1", "--samples", "1", "--out",
                                                 str(tmp_path / "o")],
}
DATA_CASES = [(surface, label) for surface in DATA_SURFACES for label in BAD_DATA_FILES] + \
             [("train-text", label) for label in TEXT_FILES]


@pytest.mark.parametrize("surface,label", DATA_CASES, ids=[f"{s}-{label}" for s, label in DATA_CASES])
def test_a_bad_data_file_is_refused_naming_the_file_and_the_place(tmp_path, saved_model, surface, label):
    """Every reader of local data files: one clear error naming the file and the line, record or field;
    nothing is left behind. Before: a record whose field is not text named no file, a parquet file with no
    rows gave pyarrow's "BatchSize must be greater than 0"."""
    path, what = _data_file(tmp_path, label)
    if surface == "train-text":
        argv = ["train", str(_train_files_config(tmp_path, path))]
    else:
        argv = [str(saved_model) if a == "{M}" else a for a in DATA_SURFACES[surface](tmp_path, path)]
    message = _refused(argv, what)
    assert str(path) in message or path.name in message, message
    assert not (tmp_path / "runs").exists() and not (tmp_path / "o").exists()
