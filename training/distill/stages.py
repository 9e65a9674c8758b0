"""The four stages of cross-architecture distillation (thesis §3.4), each a run folder under <output_dir>/<name>:

    stage1/  final/ (the converted student, models/convert.py), summary.json (student and teacher accuracy)
    stage2/  attention alignment (align.py)    a run folder of training/loop.py: config.yaml, log.jsonl,
    stage3/  logit distillation (kd.py)         checkpoints/, curves.png, summary.json, final/ (loadable with
    stage4/  supervised fine-tuning             AutoModelForCausalLM); each starts from the previous final/

Stages 2 and 3 are the training loop of ``assocmem train`` (exact resume, DDP, gradient transforms) with
another objective (``DistillTrainer``); stage 4 is that loop unchanged. Running the same command again
skips finished stages and resumes a started one from its newest checkpoint (after a SIGKILL too).
The teacher is loaded once per process and held frozen in eval mode.
"""
from __future__ import annotations

import functools
import io
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..checkpoint import latest_checkpoint
from ..config import ConfigError, ModelConfig, TrainConfig
from ..config_files import read_yaml
from ..data import build_datasets, data_vocab_size
from ..distributed import barrier, broadcast_object, init_distributed, shutdown
from ..loop import Trainer, train
from ..metrics import evaluate
from ..model_factory import hf_config_object, hf_model, load_pretrained, pretrained_folder
from ..objective import IGNORE_INDEX, CausalLMObjective
from ..out_of_memory import OutOfMemory, out_of_memory_guard
from ..progress import Progress, progress_line
from ..runlog import CONFIG_FILE, SUMMARY_FILE, config_differences
from ..tasks import arrays_to_dataset
from .align import AlignmentObjective
from .config import AlignStage, DistillConfig, KDStage, RandomTeacher, distill_config_from_dict
from .kd import KDObjective

DISTILL_FILE = "distill.yaml"
TRANSFERRED = ("qkv_proj.weight", "o_proj.weight")  # what stage 1 copies into a replaced mixer
STAGE_WORK = {1: "weight transfer", 2: "attention alignment", 3: "logit distillation",
              4: "supervised fine-tuning"}  # what each stage does, in its progress lines


# ---------------------------------------------------------------- checks before any work
def check_distill(cfg: DistillConfig) -> list[int]:
    """Refuse a config that cannot run, before anything is loaded or written; returns the replaced layers.

    A missing teacher folder (``teacher``), a teacher the student cannot take (``teacher``: architecture,
    rope scaling, activation, biases), replaced layers out of range (``student.*``), an unknown or
    non-parametric student mixer (``student.mixer``), data with a larger vocabulary than the teacher's.
    """
    from assocmem.memories import NonParametric, Spectral
    from assocmem.mixers import get_preset
    from assocmem.models.convert import check_replace, check_teacher_config
    try:
        config = teacher_config(cfg)
    except (OSError, ValueError, KeyError) as err:  # FileNotFoundError: not a saved model
        raise ConfigError(f"teacher: {err}") from None
    try:
        check_teacher_config(config, [])
    except ValueError as err:
        raise ConfigError(f"teacher: {err}") from None
    try:
        layers = cfg.student.layers(config.num_hidden_layers)
        check_replace(layers, config.num_hidden_layers)
    except ValueError as err:
        raise ConfigError(f"student: {err}") from None
    try:
        check_teacher_config(config, layers)  # what only replaced layers need (no attention biases)
    except ValueError as err:
        raise ConfigError(f"teacher: {err}") from None
    try:
        spec = get_preset(cfg.student.mixer)
    except (KeyError, ValueError) as err:
        raise ConfigError(f"student.mixer: {err}") from None
    if isinstance(spec.memory, (NonParametric, Spectral)):
        raise ConfigError(f"student.mixer: {cfg.student.mixer!r} has a {spec.memory.kind} memory and cannot take the "
                          f"teacher's q/k/v/o; choose a parametric-memory mixer (gated_deltanet, mamba2, gla, ...)")
    for where, data in (("data", cfg.data), ("stage4.data", cfg.stage4 and cfg.stage4.data)):
        if data and data_vocab_size(data) > config.vocab_size:
            raise ConfigError(f"{where}: vocabulary {data_vocab_size(data)} exceeds the teacher's "
                              f"vocab_size={config.vocab_size}")
    if (cfg.stage2 is not None or cfg.stage3 is not None and cfg.stage3.trainable == "mixers") and not layers:
        raise ConfigError("student: no layer is replaced, so stages 2 and 3 (trainable: mixers) have nothing to train")
    return layers


def teacher_config(cfg: DistillConfig):
    """The transformers config of the teacher: its folder's, or the random teacher's (vocabulary: the data's)."""
    from assocmem.models.hf_load import load_hf_config

    if isinstance(cfg.teacher, RandomTeacher):
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        config = hf_config_object(cfg.teacher.hf_config, vocab_size=data_vocab_size(cfg.data))
        config.architectures = config.architectures or [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
        return config  # as save_pretrained would write it
    return load_hf_config(pretrained_folder(cfg.teacher))


def load_teacher(cfg: DistillConfig) -> nn.Module:
    """The teacher in eval mode: loaded from its folder, or built at random under ``torch.manual_seed(cfg.seed)``."""
    if isinstance(cfg.teacher, RandomTeacher):
        torch.manual_seed(cfg.seed)
        return hf_model(cfg.teacher.hf_config, vocab_size=data_vocab_size(cfg.data)).eval()
    return load_pretrained(cfg.teacher)


# ---------------------------------------------------------------- data
def label_all_positions(dataset):
    """Every position of a row supervised up to its last supervised one (labels = input_ids there, −100 after:
    right padding stays out). Rows with no supervised position keep none."""
    ids = np.asarray(dataset["input_ids"], dtype=np.int64)                 # [N, T]
    labels = np.asarray(dataset["labels"], dtype=np.int64)                 # [N, T]
    supervised = labels != IGNORE_INDEX
    last = np.where(supervised.any(1), labels.shape[1] - 1 - np.argmax(supervised[:, ::-1], axis=1), -1)  # [N]
    keep = np.arange(labels.shape[1])[None, :] <= last[:, None]           # [N, T]
    return arrays_to_dataset({"input_ids": ids, "labels": np.where(keep, ids, IGNORE_INDEX)})


# ---------------------------------------------------------------- stages 2 and 3
def trainable_parameters(model: nn.Module, layers: list[int], which: str, *, before_o_proj: bool = False) -> list[str]:
    """Names of the parameters a stage trains: ``all``; ``mixers``/``mixer`` (the replaced layers' mixers);
    ``new`` (those mixers' parameters that stage 1 did not copy from the teacher). ``before_o_proj``: leave
    out o_proj, which a loss read before it does not reach (stage 2, target: heads; DDP needs every trained
    parameter to get a gradient)."""
    names = []
    for name, _ in model.named_parameters():
        if which == "all":
            names.append(name)
            continue
        for i in layers:
            prefix = f"model.layers.{i}.mixer."
            own = name[len(prefix):]
            if name.startswith(prefix) and (which != "new" or own not in TRANSFERRED) and not (
                    before_o_proj and own.startswith("o_proj.")):
                names.append(name)
    return names


class DistillTrainer(Trainer):
    """The training loop with a teacher: stage 2 (AlignmentObjective) or stage 3 (KDObjective)."""

    def __init__(self, cfg: TrainConfig, info, run_dir: Path, *, resume: bool, overwrite: bool = False,
                 teacher: nn.Module, stage: AlignStage | KDStage, layers: list[int]):
        self.teacher, self.stage, self.layers = teacher, stage, layers
        super().__init__(cfg, info, run_dir, resume=resume, overwrite=overwrite)
        if isinstance(stage, AlignStage) or stage.positions == "all":
            self.train_ds = label_all_positions(self.train_ds)

    def build_model(self, vocab_size: int) -> nn.Module:
        model = super().build_model(vocab_size)
        which = self.stage.trainable
        heads = isinstance(self.stage, AlignStage) and self.stage.target == "heads"
        chosen = set(trainable_parameters(model, self.layers, which, before_o_proj=heads))
        if not chosen:
            raise ValueError(f"trainable: {which} selects no parameter of the student (replaced layers {self.layers})")
        for name, p in model.named_parameters():
            p.requires_grad_(name in chosen)
        return model

    def build_objective(self) -> CausalLMObjective:
        teacher = self.teacher.to(self.info.device)
        if isinstance(self.stage, AlignStage):
            return AlignmentObjective(self.model, teacher, self.layers, self.stage.target)
        s = self.stage
        return KDObjective(self.model, teacher, direction=s.direction, temperature=s.temperature, w_kl=s.w_kl,
                           w_ce=s.w_ce)


def stage_config(cfg: DistillConfig, k: int, init_from: Path) -> TrainConfig:
    """The TrainConfig of stage k (2, 3 or 4): its folder <root>/stage<k>, starting from ``init_from``."""
    stage = getattr(cfg, f"stage{k}")
    data = stage.data if k == 4 and stage.data is not None else cfg.data
    return TrainConfig.model_validate({
        "name": f"stage{k}", "output_dir": str(cfg.root), "seed": cfg.seed,
        "model": ModelConfig(init_from=str(init_from)).model_dump(mode="json"),
        "data": data.model_dump(mode="json"), "optim": stage.optim.model_dump(mode="json"),
        "train": stage.train.model_dump(mode="json")})


# ---------------------------------------------------------------- stage 1
def _eval(model: nn.Module, eval_ds, batch_size: int, info) -> dict | None:
    if eval_ds is None:
        return None
    return evaluate(CausalLMObjective(model, "all"), eval_ds, batch_size=batch_size, info=info)


def run_stage1(cfg: DistillConfig, teacher: nn.Module, layers: list[int]) -> dict:
    """Weight transfer (models/convert.py): write <root>/stage1/final and summary.json (student and teacher
    accuracy on the eval set). Every rank converts and evaluates its share; rank 0 writes."""
    from assocmem.models.convert import from_hf_causal_lm

    out = cfg.root / "stage1"
    info = init_distributed("auto")
    problem = None
    if info.is_main and out.exists():  # unfinished (no summary.json) or --overwrite: stage 1 is redone
        foreign = sorted(p.name for p in out.iterdir() if p.name not in ("final", SUMMARY_FILE))
        problem = (f"{out} holds {foreign}, which stage 1 does not write; it is left as it is (move it away, or "
                   f"choose another name)") if foreign else None
        if problem is None:
            shutil.rmtree(out)
    problem = broadcast_object(problem)
    if problem is not None:
        raise FileExistsError(problem)
    torch.manual_seed(cfg.seed)  # the replaced mixers' fresh gates, conv and norms (the same on every rank)
    student = from_hf_causal_lm(teacher, replace=layers, student=cfg.student.mixer,
                                identity_conv=cfg.student.identity_conv)
    _, eval_ds, _ = build_datasets(cfg.data)
    batch = next((getattr(cfg, f"stage{k}").train.eval_batch_size for k in cfg.stages()[1:]), 64)
    summary = {"name": "stage1", "replaced": layers, "mixer": cfg.student.mixer,  # every rank evaluates its share
               "eval": _eval(student, eval_ds, batch, info), "teacher_eval": _eval(teacher, eval_ds, batch, info)}
    if info.is_main:
        student.save_pretrained(out / "final")
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    barrier()
    return json.loads((out / SUMMARY_FILE).read_text())


# ---------------------------------------------------------------- all stages
def stage_status(folder: Path) -> str:
    """'done' (summary.json), 'started' (a config.yaml or a checkpoint), or 'new'."""
    if (folder / SUMMARY_FILE).is_file():
        return "done"
    if folder.is_dir() and ((folder / CONFIG_FILE).is_file() or latest_checkpoint(folder) is not None):
        return "started"
    return "new"


def _record_config(cfg: DistillConfig, overwrite: bool) -> None:
    """<root>/distill.yaml: the config of the stages in the folder; another config there is refused (output_dir
    aside: a distillation moved to another folder goes on there, as a moved training run does)."""
    path = cfg.root / DISTILL_FILE
    if path.is_file() and not overwrite:
        old = distill_config_from_dict(read_yaml(path)).model_dump(mode="json")
        changed = [k for k in config_differences(old, cfg.model_dump(mode="json")) if k != "output_dir"]  # moved
        if changed:
            raise ValueError(f"{cfg.root} holds a distillation with another config (changed: {changed}); choose "
                             f"another name, or --overwrite to redo the stages with this one")
    cfg.root.mkdir(parents=True, exist_ok=True)
    path.write_text(cfg.to_yaml())


def run_distill(cfg: DistillConfig, *, stage: int | None = None, overwrite: bool = False) -> dict[str, dict]:
    """Run the configured stages (or only ``stage``), skipping finished ones and resuming a started one;
    returns {"stage<k>": summary}. Everything is checked (``check_distill``) before any work."""
    layers = check_distill(cfg)
    stages = cfg.stages()
    if stage is not None and stage not in stages:
        raise ConfigError(f"--stage {stage}: stage{stage} is not configured (it is null); configured: {stages}")
    chosen = stages if stage is None else [stage]
    if stage is not None and stage > 1:
        before = cfg.root / f"stage{stages[stages.index(stage) - 1]}"
        if stage_status(before) != "done":
            raise ValueError(f"--stage {stage} starts from {before}/final, which is not finished; run it first")
    info = init_distributed("auto")  # under torchrun: one process group for every stage (train() keeps it)
    try:
        return _run_stages(cfg, info, layers, stages, chosen, overwrite)
    finally:
        shutdown()


def _run_stage(cfg: DistillConfig, k: int, teacher: nn.Module, layers: list[int], stages: list[int], status: str,
               overwrite: bool) -> dict:
    """Stage ``k`` from the previous stage's final/ (stage 1: from the teacher); its summary."""
    if k == 1:  # it evaluates with the next stage's eval_batch_size (run_stage1)
        knobs = [f"stage{j}.train.eval_batch_size (now {getattr(cfg, f'stage{j}').train.eval_batch_size}; stage 1 "
                 f"evaluates with it)" for j in cfg.stages()[1:2]] or ["data.num_eval"]
        with out_of_memory_guard(cfg.root / "stage1", lambda: "in stage 1 (weight transfer and its evaluation)",
                                 lambda: knobs, "assocmem distill CONFIG"):
            return run_stage1(cfg, teacher, layers)
    previous = cfg.root / f"stage{stages[stages.index(k) - 1]}" / "final"
    make = Trainer if k == 4 else functools.partial(DistillTrainer, teacher=teacher, layers=layers,
                                                    stage=getattr(cfg, f"stage{k}"))
    return train(stage_config(cfg, k, previous), resume=status == "started" and not overwrite, overwrite=overwrite,
                 trainer=make)


def _run_stages(cfg: DistillConfig, info, layers: list[int], stages: list[int], chosen: list[int],
                overwrite: bool) -> dict[str, dict]:
    """Rank 0 decides which stages are done; every rank runs the others in order."""
    decided: dict | str | None = None
    if info.is_main:
        try:
            _record_config(cfg, overwrite)
            decided = {k: stage_status(cfg.root / f"stage{k}") for k in chosen}
        except (ValueError, OSError) as err:
            broadcast_object(f"rank 0: {type(err).__name__}: {err}")
            raise
    statuses = broadcast_object(decided)
    if isinstance(statuses, str):
        raise ValueError(statuses)
    say = progress_line("distill", stream=None if info.is_main else io.StringIO())  # rank 0 speaks
    say(f"loading the teacher {cfg.teacher} ...")
    teacher = load_teacher(cfg)
    tracker = Progress(len(chosen), "distill", stream=None if info.is_main else io.StringIO())
    summaries = {}
    for k in chosen:
        folder = cfg.root / f"stage{k}"
        if statuses[k] == "done" and not overwrite:
            summaries[f"stage{k}"] = json.loads((folder / SUMMARY_FILE).read_text())
            tracker.done(f"stage{k}", "finished before, skipped")
            continue
        tracker.start(f"stage{k} ({STAGE_WORK[k]})")
        try:
            summaries[f"stage{k}"] = _run_stage(cfg, k, teacher, layers, stages, statuses[k], overwrite)
        except OutOfMemory as err:  # the settings to lower, as the distill config spells them
            err.lower = err.lower if k == 1 else [f"stage{k}.{setting}" for setting in err.lower]
            raise
        tracker.done(f"stage{k} ({STAGE_WORK[k]})")
    return summaries
