"""The training loop: one function, ``train(cfg)``, for one process or many (torchrun + DDP).

Per optimizer step s (global batch B sequences, W processes, A micro-batches each):

  1. rows = StepSampler.indices(s)[rank slice]            B / W rows for this process
  2. n = Σ over ranks of supervised positions              (one all-reduce)
  3. for each micro-batch: (Σ token losses) · W / n → backward (packed text with
     data.documents: separate also passes position_ids: each document read on its own)
     (DDP averages gradients over W, so the gradient is that of the mean
     loss over the global batch: identical to one process with batch B)
  4. gradient transforms (train.grad_transforms: FGP/PFFT, GrokFast, ...), on the all-reduced gradient
  5. clip the global gradient norm; AdamW step; scheduler step
  6. log / evaluate / checkpoint on schedule

Seeded and deterministic: the model is initialised under ``torch.manual_seed(seed)``,
batches depend only on the step, and a checkpoint carries optimizer, scheduler
every rank's RNG state and the gradient transforms' state, so a resumed run reproduces an uninterrupted one
bit for bit on CPU.
"""
from __future__ import annotations

import contextlib
import json
import math
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from assocmem.mixers.layer import check_backend, set_backend

from . import checkpoint as ckpt
from .config import ConfigError, TrainConfig, TrainLoopConfig
from .data import build_datasets, data_eos_id, data_tokenizer, save_tokenizer
from .distributed import (DistInfo, all_gather_object, all_reduce_sum, barrier, broadcast_object, init_distributed,
                          rank_slice, shutdown)
from .grad_transforms import GradTransforms
from .log_sinks import check_sinks, open_sinks
from .metrics import batch_positions, batch_tensors, evaluate
from .mixture import Mixture, MixtureSampler
from .model_factory import build_from_config, model_description, set_end_token
from .objective import CausalLMObjective, check_documents_apart, check_supervised_logits
from .optim import build_optimizer, build_scheduler, extend_schedule
from .out_of_memory import out_of_memory_guard
from .runlog import SUMMARY_FILE, RunLog, check_run_dir, create_run_dir, plot_curves
from .sampler import StepSampler


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class NonFiniteLossError(RuntimeError):
    """A step's loss or gradient norm was NaN or ±inf under ``train.on_nonfinite: stop``."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during training: the step under way was finished and a checkpoint written; the
    message names it and the command that resumes the run; ``checkpoint``: its folder (None before the first
    step). A KeyboardInterrupt, so code that does not know it stops as on any Ctrl-C."""

    def __init__(self, message: str, checkpoint: Path | None = None):
        super().__init__(message)
        self.checkpoint = checkpoint


@contextlib.contextmanager
def interrupt_after_step(notice: Callable[[], None]):
    """While the block runs, the first SIGINT only sets a flag (``notice()`` says so at once) and the
    block ends its step and stops by itself (it polls the yielded ``interrupted()``); a second SIGINT raises
    KeyboardInterrupt at once, as usual. Outside the main thread (no signals there) nothing changes."""
    hit: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def handler(signum, frame):
        if hit:
            raise KeyboardInterrupt
        hit.append(True)
        notice()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(hit)
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_main(info: DistInfo, fn, *errors: type[Exception]):
    """``fn()`` on rank 0, its value on every rank; an ``errors`` exception there is raised on every rank (no hang)."""
    result: tuple[str, object] = ("", None)
    failure: Exception | None = None
    if info.is_main:
        try:
            result = ("ok", fn())
        except errors as err:
            result, failure = ("error", f"{type(err).__name__}: {err}"), err
    status, payload = broadcast_object(result)
    if failure is not None:
        raise failure
    if status == "error":
        raise RuntimeError(f"rank 0 failed: {payload}")
    return payload


_SETUP_ERRORS = (ValueError, OSError)  # ConfigError, CheckpointError, FileExistsError, NotADirectoryError, ...


def _micro_batches(rows: np.ndarray, micro: int) -> list[np.ndarray]:
    if len(rows) % micro:
        raise ValueError(f"the per-process batch ({len(rows)}) must be divisible by train.micro_batch_size ({micro})")
    return [rows[i:i + micro] for i in range(0, len(rows), micro)]


def set_mixer_backend(model: nn.Module, train: TrainLoopConfig, device: torch.device) -> None:
    """train.backend on every recurrent mixer of ``model`` (if given), each lowered now for ``device`` and
    train.precision: a backend FLA would refuse raises ConfigError (layer, reason, fix) before training."""
    if train.backend is not None:
        set_backend(model, train.backend)
    try:
        check_backend(model, device, torch.bfloat16 if train.precision == "bf16" else torch.float32)
    except ValueError as err:
        raise ConfigError(f"train.backend: {err}") from None


def notice_interrupt(info: DistInfo, name: str, step: int) -> None:
    """What the first Ctrl-C prints at once (rank 0)."""
    if info.is_main:
        print(f"\n{name}: Ctrl-C: finishing step {step + 1} and writing a checkpoint (Ctrl-C again to stop at "
              f"once, without one)", file=sys.stderr, flush=True)


def stop_everywhere(info: DistInfo, here: bool) -> bool:
    """Whether any process was interrupted: every process stops at the same step (the checkpoint is collective;
    torchrun passes Ctrl-C to every worker, not at the same instant)."""
    if not info.distributed:
        return here
    return bool(all_reduce_sum(torch.tensor([float(here)], dtype=torch.float64)).item() > 0)


def save_on_interrupt(run_dir: Path, step: int, total: int, save: Callable[[], None], log,
                      resume: str) -> TrainingInterrupted:
    """After a Ctrl-C between steps: write the checkpoint of ``step`` (unless the schedule just did), close the
    log and return the exception to raise, its one-line message naming the checkpoint and the ``resume``
    command."""
    last = ckpt.latest_checkpoint(run_dir)
    if step > 0 and (last is None or ckpt.step_of(last) != step):
        save()
    if log is not None:
        log.close()
    last = ckpt.latest_checkpoint(run_dir)
    if last is None:
        return TrainingInterrupted("interrupted before the first step: nothing to resume; start the run again "
                                   "(with --overwrite)")
    return TrainingInterrupted(f"interrupted: checkpoint {last} (step {step} of {total}); resume with `{resume}`", last)


class Trainer:
    """State of one run; ``run()`` trains from the current step to the end."""

    def __init__(self, cfg: TrainConfig, info: DistInfo, run_dir: Path, *, resume: bool, overwrite: bool = False):
        self.cfg, self.info, self.run_dir = cfg, info, run_dir
        check_sinks(cfg.train.log_to)  # a missing package is refused before any work
        self.train_ds, self.eval_ds, vocab = build_datasets(cfg.data)
        seed_everything(cfg.seed)
        self.model = self.build_model(vocab).to(info.device).train()
        set_mixer_backend(self.model, cfg.train, info.device)  # refused here, before the run folder and any step
        self.tokenizer = data_tokenizer(cfg.data)  # saved beside the final model (None: synthetic ids)
        set_end_token(self.model, data_eos_id(cfg.data, self.tokenizer))
        self.total_steps = cfg.train.total_steps(len(self.train_ds))
        self.mixture = self.train_ds if isinstance(self.train_ds, Mixture) else None
        self.sampler = (MixtureSampler(self.mixture, cfg.train.batch_size, seed=cfg.seed) if self.mixture is not None
                        else StepSampler(len(self.train_ds), cfg.train.batch_size, seed=cfg.seed))
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.total_steps)
        self.grad_transforms = GradTransforms(cfg.train.grad_transforms, self.model)
        self.step, self.tokens, self.elapsed, self.skipped = 0, 0, 0.0, 0
        self.objective = self.build_objective()
        if cfg.train.logits == "supervised":
            ids, labels = batch_tensors(self.first_dataset, [0], info.device)
            check_supervised_logits(self.model, ids, labels)
        if batch_positions(self.first_dataset, [0], info.device):  # packed documents, read one by one
            self._check_documents_apart()
        # every check has passed: only now is the run folder created (or, on resume, repaired)
        latest = _on_main(info, lambda: self._open_run_dir(resume, overwrite), *_SETUP_ERRORS)
        if latest is not None:
            self._restore(Path(latest))
        if cfg.train.compile:  # in place: the model's state_dict keys (checkpoints) stay as they are
            (self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model).compile()
        self.wrapped: nn.Module = self.objective
        if info.distributed:
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.objective, device_ids=[info.device.index] if info.device.type == "cuda" else None)
        self.log = (RunLog(self.run_dir, keep_until_step=self.step,
                           sinks=open_sinks(cfg.train.log_to, self.run_dir, name=self.run_dir.name,
                                            config=cfg.model_dump(mode="json")))
                    if info.is_main else None)

    def _check_documents_apart(self) -> None:
        """data.documents: separate -- the objective must take position_ids and the model keep documents apart."""
        import inspect

        if "position_ids" not in inspect.signature(self.objective.forward).parameters:
            raise ValueError(f"{type(self.objective).__name__} does not read packed documents one by one (its forward "
                             f"takes no position_ids); set data.documents: joined")
        check_documents_apart(self.objective, batch_tensors(self.first_dataset, [0], self.info.device)[0])

    @property
    def first_dataset(self):
        """The dataset the first step reads (the first stage's, for a mixture)."""
        return self.train_ds if self.mixture is None else self.mixture.stage_dataset(0)

    def batch_rows(self, step: int):
        """(dataset, its rows for the global batch of ``step``: int64 [batch_size])."""
        if self.mixture is not None:
            return self.sampler.batch(step)
        return self.train_ds, self.sampler.indices(step)

    def build_model(self, vocab_size: int) -> nn.Module:
        """The network trained (a subclass may freeze parameters here: the optimizer takes the trainable ones)."""
        return build_from_config(self.cfg.model, vocab_size=vocab_size)

    def build_objective(self) -> CausalLMObjective:
        """The module whose forward(input_ids, labels) gives (loss sum, supervised count, correct) and whose
        ``selected_logits`` the evaluation reads (training/distill/ trains against a teacher through it)."""
        return CausalLMObjective(self.model, self.cfg.train.logits)

    # ------------------------------------------------------------ checkpoints
    def _open_run_dir(self, resume: bool, overwrite: bool) -> str | None:
        """Rank 0: create the run folder; on resume, repair interrupted writes and pick the newest checkpoint
        that verifies (damaged ones are set aside with a warning). Returns that checkpoint's path or None."""
        latest = None
        if resume:
            ckpt.recover_interrupted_writes(self.run_dir)
            latest = ckpt.latest_valid_checkpoint(self.run_dir, set_aside=True)
            if latest is not None and ckpt.step_of(latest) > self.total_steps:
                raise ValueError(f"checkpoint {latest} is at step {ckpt.step_of(latest)}, beyond this run's "
                                 f"{self.total_steps} steps; resume with --set train.steps={ckpt.step_of(latest)} "
                                 f"or more")
        create_run_dir(self.cfg, self.run_dir, overwrite=overwrite)
        return None if latest is None else str(latest)

    def _restore(self, path: Path) -> None:
        state = ckpt.load_state(path)
        ckpt.load_weights(path, self.model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state["world_size"] != self.info.world_size:
            raise ValueError(f"checkpoint {path} was written by {state['world_size']} processes; resume it with "
                             f"the same number (got {self.info.world_size}) for an exact continuation")
        ckpt.set_rng_state(state["rng"][self.info.rank])
        self.grad_transforms.load_state_dict(state.get("grad_transforms", []))
        self.step, self.tokens, self.elapsed = state["step"], state["tokens"], state["elapsed"]
        self.skipped = state.get("skipped_steps", 0)
        if state["samples_seen"] != self.step * self.cfg.train.batch_size:
            raise ValueError(f"checkpoint {path}: data position {state['samples_seen']} does not match step "
                             f"{self.step} × batch {self.cfg.train.batch_size}")
        extend_schedule(self.optimizer, self.scheduler, self.total_steps)

    def save(self) -> None:
        rng = all_gather_object(ckpt.rng_state())
        if self.info.is_main:
            state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                     "rng": rng, "world_size": self.info.world_size, "tokens": self.tokens,
                     "elapsed": self.elapsed, "samples_seen": self.step * self.cfg.train.batch_size,
                     "grad_transforms": self.grad_transforms.state_dict(), "skipped_steps": self.skipped}
            ckpt.save_checkpoint(self.run_dir, self.step, self.model, state, keep_last=self.cfg.train.keep_last)
        barrier()

    # ------------------------------------------------------------ one step
    def train_step(self) -> dict[str, float]:
        """One optimizer step on the global batch of ``self.step``; returns global metrics.

        A NaN/inf loss or gradient norm (``train.on_nonfinite``): stop raises NonFiniteLossError
        before anything is updated; skip leaves weights, optimizer and gradient-transform states
        as they were and only advances the step, the schedule and the data position.
        """
        cfg, info = self.cfg.train, self.info
        dataset, rows = self.batch_rows(self.step)
        rows = rows[rank_slice(cfg.batch_size, info)]
        micro = _micro_batches(rows, cfg.micro_batch_size or len(rows))
        batches = [(*batch_tensors(dataset, m.tolist(), info.device),
                    batch_positions(dataset, m.tolist(), info.device)) for m in micro]
        sums, bad_micro = self._forward_backward(batches)
        sums = all_reduce_sum(sums)  # every process sees the global loss (the non-finite decision is shared)
        finite = math.isfinite(float(sums[0]))
        if finite and len(self.grad_transforms):  # a transform's state must never see a non-finite gradient
            finite = math.isfinite(float(nn.utils.get_total_norm([p.grad for p in self.model.parameters()
                                                                  if p.grad is not None])))
        if finite:
            self.grad_transforms.apply()  # after the all-reduce of the last backward: the same on every rank
        clip = self.cfg.optim.grad_clip
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip is not None else float("inf"))
        finite = finite and math.isfinite(float(grad_norm))
        lr = self.optimizer.param_groups[0]["lr"]
        loss = float(sums[0] / max(sums[1], 1.0))
        if not finite and cfg.on_nonfinite == "stop":
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(self._non_finite_message(loss, float(grad_norm), micro, bad_micro))
        if finite:
            self.optimizer.step()
        else:  # on_nonfinite: skip -- no update; the schedule and the data position still advance
            self.skipped += 1
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += cfg.batch_size * batches[0][0].shape[1]
        return {"loss": loss, "accuracy": float(sums[2] / max(sums[1], 1.0)), "lr": lr,
                "grad_norm": float(grad_norm), "skipped_steps": self.skipped}

    def _forward_backward(self, batches: list) -> tuple[torch.Tensor, int | None]:
        """Accumulate the gradient of the global mean loss over this process's micro-batches.

        Returns this process's [loss sum, supervised count, correct] (float64) and the index of
        its first micro-batch whose loss is not finite (None if all are).
        """
        info = self.info
        local_n = sum(int(self.objective.scored(labels).sum()) for _, labels, _ in batches)
        n_global = float(all_reduce_sum(torch.tensor([local_n], dtype=torch.float64)).item())
        scale = info.world_size / max(n_global, 1.0)
        sums = torch.zeros(3, dtype=torch.float64)  # loss sum, supervised count, correct
        bad_micro = None
        for i, (input_ids, labels, positions) in enumerate(batches):
            sync = i == len(batches) - 1 or not info.distributed
            with (contextlib.nullcontext() if sync else self.wrapped.no_sync()):
                with torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=self.cfg.train.precision == "bf16"):
                    loss_sum, count, correct = self.wrapped(input_ids, labels, **positions)
                (loss_sum * scale).backward()
            sums += torch.stack([loss_sum.detach().double().cpu(), count.double().cpu(), correct.double().cpu()])
            if bad_micro is None and not bool(torch.isfinite(loss_sum.detach())):
                bad_micro = i
        return sums, bad_micro

    def _non_finite_message(self, loss: float, grad_norm: float, micro: list[np.ndarray], bad: int | None) -> str:
        where = (f"this process's micro-batch {bad} of {len(micro)} (dataset rows {micro[bad].tolist()})"
                 if bad is not None else "another process's batch" if self.info.distributed
                 else "a finite loss with a non-finite gradient")
        last = ckpt.latest_checkpoint(self.run_dir)
        return (f"non-finite training loss at step {self.step + 1} (batch index {self.step}, epoch "
                f"{self.sampler.epoch_of(self.step):.3f}): loss {loss}, gradient norm {grad_norm}, first seen in "
                f"{where}; train.on_nonfinite=stop, so the run stops without updating the weights. The newest "
                f"checkpoint is {last if last is not None else 'none (no checkpoint yet)'}; resume it with "
                f"--resume and a smaller optim.lr, or --set train.on_nonfinite=skip to skip such steps")

    # ------------------------------------------------------------ the run
    def evaluate(self) -> dict[str, float] | None:
        if self.eval_ds is None:
            return None
        metrics = evaluate(self.objective, self.eval_ds, batch_size=self.cfg.train.eval_batch_size,
                           info=self.info, precision=self.cfg.train.precision)
        if self.log is not None:
            self.log.write({"step": self.step, "split": "eval", **metrics})
        return metrics

    def run(self) -> dict:
        """Train to the last step, then ``finish``; a resumed run that had already finished returns its summary."""
        cfg = self.cfg.train
        saved = self.run_dir / SUMMARY_FILE
        if self.step == self.total_steps and saved.is_file():
            if self.log is not None:
                self.log.close()
            barrier()
            return json.loads(saved.read_text())
        bar = tqdm(total=self.total_steps, initial=self.step, desc=self.cfg.name, dynamic_ncols=True,
                   disable=not (self.info.is_main and cfg.progress))
        window_elapsed, window_tokens = self.elapsed, self.tokens
        clock = time.perf_counter()
        with out_of_memory_guard(self.run_dir, self._where, self.memory_settings, self.resume_command()):
            with interrupt_after_step(self._notice_interrupt) as interrupted:
                while self.step < self.total_steps:
                    if stop_everywhere(self.info, interrupted()):
                        bar.close()
                        raise self._save_interrupted()
                    clock, window_elapsed, window_tokens = self._one_step(bar, clock, window_elapsed, window_tokens)
            bar.close()
            return self.finish()

    def _where(self) -> str:
        return (f"in step {self.step + 1} of {self.total_steps}" if self.step < self.total_steps
                else "in the final evaluation")

    def memory_settings(self) -> list[str]:
        """What to lower after running out of memory, with the values this run has."""
        t = self.cfg.train
        return [f"train.micro_batch_size (now {t.micro_batch_size or t.batch_size}; the global batch stays "
                f"{t.batch_size} by gradient accumulation)", f"train.eval_batch_size (now {t.eval_batch_size})"]

    def resume_command(self) -> str:
        return f"assocmem train {self.run_dir} --resume"

    def _one_step(self, bar, clock: float, window_elapsed: float, window_tokens: int):
        """One step with its logging, evaluation and checkpoint on schedule; returns the clocks the next
        step continues from."""
        cfg = self.cfg.train
        metrics = self.train_step()
        now = time.perf_counter()
        self.elapsed += now - clock
        clock = now
        bar.update(1)
        if self.step % cfg.log_every == 0 or self.step == self.total_steps:
            speed = (self.tokens - window_tokens) / max(self.elapsed - window_elapsed, 1e-9)
            window_elapsed, window_tokens = self.elapsed, self.tokens
            record = {"step": self.step, "split": "train", **metrics, "tokens": self.tokens,
                      "tokens_per_s": speed, "elapsed_s": self.elapsed,
                      "epoch": self.sampler.epoch_of(self.step), **self._mixture_drawn()}
            if self.log is not None:
                self.log.write(record)
            bar.set_postfix(loss=f"{metrics['loss']:.4f}", acc=f"{metrics['accuracy']:.3f}",
                            tok_s=f"{speed:,.0f}")
        if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < self.total_steps:
            self.evaluate()
        if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < self.total_steps:
            self.save()
        clock = time.perf_counter()  # evaluation and checkpoints are not training time
        return clock, window_elapsed, window_tokens

    def _mixture_drawn(self) -> dict:
        """For a mixture: the stage of the last step and ``mix/<source>``, the rows drawn from each source over the
        steps since the previous log line (steps (step − log_every, step], cut at a multiple of log_every)."""
        if self.mixture is None:
            return {}
        every = self.cfg.train.log_every
        start = (self.step - 1) // every * every
        drawn = self.sampler.counts(start, self.step)
        return {"stage": self.mixture.stage_of(self.step - 1), **{f"mix/{k}": v for k, v in drawn.items()}}

    def _notice_interrupt(self) -> None:
        notice_interrupt(self.info, self.cfg.name, self.step)

    def _save_interrupted(self) -> TrainingInterrupted:
        return save_on_interrupt(self.run_dir, self.step, self.total_steps, self.save, self.log,
                                 self.resume_command())

    def finish(self) -> dict:
        final_eval = self.evaluate()
        self.save()
        summary = {"name": self.cfg.name, "steps": self.step, "tokens": self.tokens,
                   "train_seconds": self.elapsed, "tokens_per_s": self.tokens / max(self.elapsed, 1e-9),
                   "world_size": self.info.world_size, "model": model_description(self.model), "eval": final_eval}
        if self.info.is_main:
            self.model.save_pretrained(self.run_dir / "final")
            if self.tokenizer is not None:
                save_tokenizer(self.tokenizer, self.run_dir / "final")
            (self.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
            self.log.close()
            plot_curves(self.run_dir)
        barrier()
        return summary


def train(cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False,
          trainer: Callable[..., Trainer] = Trainer) -> dict:
    """Train the run ``cfg`` describes (joining torchrun's process group if launched by torchrun).

    ``trainer``: Trainer, or a callable with its signature that returns a subclass (training/distill/stages.py
    passes ``functools.partial(DistillTrainer, teacher=..., stage=...)``).
    Returns the summary (also written to <run>/summary.json). Resuming a run that has already
    trained all its steps returns its summary and writes nothing.
    """
    joined = torch.distributed.is_available() and torch.distributed.is_initialized()  # a caller's process group
    info = init_distributed(cfg.train.device)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        if cfg.train.threads is not None:
            torch.set_num_threads(cfg.train.threads)
        if deterministic != cfg.train.deterministic:  # (the call imports torch._inductor: only when needed)
            torch.use_deterministic_algorithms(cfg.train.deterministic)
        run_dir = Path(_on_main(info, lambda: str(check_run_dir(cfg, resume=resume, overwrite=overwrite)),
                                *_SETUP_ERRORS))
        return trainer(cfg, info, run_dir, resume=resume, overwrite=overwrite).run()
    finally:  # leave the process as we found it (train() may be called from a notebook or a test)
        torch.set_num_threads(threads)
        if torch.are_deterministic_algorithms_enabled() != deterministic:
            torch.use_deterministic_algorithms(deterministic)
        if not joined:  # a group the caller made stays up (training/distill runs several stages in one)
            shutdown()
