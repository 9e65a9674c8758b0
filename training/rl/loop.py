"""The RL loop: ``train_rl(cfg)``, for one process or many (torchrun, gloo/nccl).

Per round s (P prompts × G completions, W processes):

  1. rows = StepSampler(num_train, P).indices(s)[rank slice]: this process's prompts
  2. rollouts (rollouts.py): samples seeded per (seed, s, row), rewards, advantages, mastered groups
  3. global sizes (one all-reduce): sequences, active tokens, kept tokens, reward / pass / length sums
  4. for each of μ inner iterations: log-probs under the policy (and once, under the frozen
     reference), the loss terms (losses.py), their gradients summed over processes (balancing.py;
     per prompt under ``balance: prompt``), combined by the algorithm (``ALGORITHMS``), clipped,
     AdamW step
  5. scheduler step; log / evaluate held-out pass@1 / checkpoint on schedule

Nothing depends on the number of processes but the float summation order: W processes compute
what one process would. A checkpoint holds the policy, optimizer, scheduler, every rank's RNG, the
round and the reference's identity (reference.py), so a resumed run reproduces an uninterrupted
one bit for bit on CPU.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .. import checkpoint as ckpt
from ..distributed import all_gather_object, all_reduce_sum, barrier, broadcast_object, init_distributed, rank_slice, shutdown
from ..generation import SamplingSettings, sample_completions
from ..loop import (
    NonFiniteLossError, interrupt_after_step, notice_interrupt, save_on_interrupt, seed_everything, stop_everywhere,
)
from ..model_factory import build_from_config, model_description
from ..optim import build_optimizer, build_scheduler, extend_schedule
from ..out_of_memory import out_of_memory_guard
from ..runlog import SUMMARY_FILE, RunLog
from ..sampler import StepSampler
from ..verifiable import problem_sets, score_response
from .balancing import Balanced, assign_gradient, balance_per_prompt, combine, split_gradients
from .config import RLConfig
from .curves import plot_rl_curves
from .losses import BatchCounts, k3_kl, policy_loss_terms
from .reference import load_reference, weights_digest
from .rollouts import EVAL_STREAM, Rollouts, collect, rollout_logprobs, sample_seed
from .runfolder import check_rl_run_dir, create_rl_run_dir
from .self_distillation import kept_completions, self_distillation_loss


@dataclass(frozen=True)
class Gradients:
    """One inner iteration's flat gradients, summed over processes (None where the algorithm needs none):
    g⁺, g⁻, g_KL, g_SD, and under ``balance: prompt`` the balanced g itself (balancing.py)."""

    positive: torch.Tensor | None = None
    negative: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    distill: torch.Tensor | None = None
    balanced: Balanced | None = None


def _policy_gradient(g: Gradients, loss) -> tuple[torch.Tensor, float]:
    return g.positive + g.negative + g.kl, 1.0


def _balanced(g: Gradients, loss) -> tuple[torch.Tensor, float]:
    out = g.balanced if g.balanced is not None else combine(g.positive, g.negative, g.kl, eps=loss.balance_eps,
                                                            cap=loss.balance_cap)
    return out.gradient, out.scale


def _self_distillation(g: Gradients, loss) -> tuple[torch.Tensor, float]:
    return g.distill, 0.0


# algorithm -> (Gradients, LossConfig) -> (the gradient the optimizer steps on, scale of g⁻)
ALGORITHMS = {"policy_gradient": _policy_gradient, "balanced": _balanced, "self_distillation": _self_distillation}


class RLTrainer:
    """State of one RL run; ``run()`` trains from the current round to the end."""

    def __init__(self, cfg: RLConfig, info, run_dir: Path, *, resume: bool, overwrite: bool):
        self.cfg, self.info, self.run_dir = cfg, info, run_dir
        self.task = cfg.data
        self.train_problems, self.eval_problems = problem_sets(cfg.data)
        if not self.train_problems:
            raise ValueError("data: the prompt set is empty; set data.num_train >= 1")
        for name, verifier in cfg.rollout.verifiers.items():  # a checker's module, a judge's model: read before
            try:                                               # the run folder is made
                verifier.load()
            except ValueError as err:
                raise ValueError(f"rollout.verifiers.{name}: {err}") from None
        if cfg.rollout.prompts_per_step % info.world_size:
            raise ValueError(f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} must be divisible by the "
                             f"number of processes ({info.world_size})")
        seed_everything(cfg.seed)
        self.policy = build_from_config(cfg.model, vocab_size=self.task.vocab_size).to(info.device).train()
        source = cfg.reference if cfg.reference is not None else cfg.model.init_from
        self.reference, self.reference_source = load_reference(source, self.policy)
        self.reference_digest = weights_digest(self.reference)
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.max_len = cfg.rollout.max_new_tokens or self.task.max_new_tokens
        self.sampler = StepSampler(len(self.train_problems), cfg.rollout.prompts_per_step, seed=cfg.seed)
        self.optimizer = build_optimizer(self.policy, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, cfg.train.steps)
        self.step, self.sampled_tokens, self.elapsed, self.skipped = 0, 0, 0.0, 0
        latest = _on_main(info, lambda: self._open_run_dir(resume, overwrite))
        if latest is not None:
            self._restore(Path(latest))
        # resume: the killed run's lines after its checkpoint go (at round 0 all of them: run() evaluates again)
        self.log = RunLog(run_dir, keep_until_step=self.step if self.step else -1) if info.is_main else None

    # ------------------------------------------------------------ checkpoints
    def _open_run_dir(self, resume: bool, overwrite: bool) -> str | None:
        latest = None
        if resume:
            ckpt.recover_interrupted_writes(self.run_dir)
            latest = ckpt.latest_valid_checkpoint(self.run_dir, set_aside=True)
        create_rl_run_dir(self.cfg, self.run_dir, overwrite=overwrite)
        return None if latest is None else str(latest)

    def _restore(self, path: Path) -> None:
        state = ckpt.load_state(path)
        if state["reference_sha256"] != self.reference_digest:
            raise ValueError(f"checkpoint {path} was trained against a reference with weights SHA-256 "
                             f"{state['reference_sha256'][:12]}…, this run's reference ({self.reference_source}) has "
                             f"{self.reference_digest[:12]}…; resume with the same reference")
        if state["world_size"] != self.info.world_size:
            raise ValueError(f"checkpoint {path} was written by {state['world_size']} processes; resume it with the "
                             f"same number (got {self.info.world_size}) for an exact continuation")
        ckpt.load_weights(path, self.policy)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        ckpt.set_rng_state(state["rng"][self.info.rank])
        self.step, self.sampled_tokens, self.elapsed = state["step"], state["sampled_tokens"], state["elapsed"]
        self.skipped = state.get("skipped_steps", 0)
        extend_schedule(self.optimizer, self.scheduler, self.cfg.train.steps)

    def save(self) -> None:
        rng = all_gather_object(ckpt.rng_state())
        if self.info.is_main:
            state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "rng": rng,
                     "world_size": self.info.world_size, "sampled_tokens": self.sampled_tokens,
                     "elapsed": self.elapsed, "skipped_steps": self.skipped, "reference_sha256": self.reference_digest,
                     "reference_source": self.reference_source}
            ckpt.save_checkpoint(self.run_dir, self.step, self.policy, state, keep_last=self.cfg.train.keep_last)
        barrier()

    # ------------------------------------------------------------ one round
    def _global_sizes(self, batch: Rollouts) -> tuple[BatchCounts, dict[str, float]]:
        """Step 3: the aggregation's global sizes and the round's global statistics."""
        mask = batch.completion_mask
        kept = kept_completions(batch.advantages)
        local = torch.tensor([mask.shape[0], float(mask.sum()), float(mask[kept].sum()),
                              float(batch.correct.sum()), batch.correct.size, float(batch.lengths.sum()),
                              batch.skipped_groups, float(batch.all_rewards.sum())], dtype=torch.float64)
        g = all_reduce_sum(local)
        counts = BatchCounts(sequences=int(g[0]), tokens=int(g[1]), max_len=self.max_len,
                             world_size=self.info.world_size)
        stats = {"kept_tokens": float(g[2]), "pass@1": float(g[3] / g[4]), "length": float(g[5] / g[4]),
                 "skipped_groups": int(g[6]), "sampled_tokens": int(g[5]),
                 "reward": float(g[7] / g[4])}
        return counts, stats

    def _gradients(self, batch, logp, old_logp, ref_logp, counts, kept_tokens, first: bool) -> tuple:
        """Step 4: the loss terms and their gradients summed over processes (``Gradients``)."""
        loss, mask = self.cfg.loss, batch.completion_mask.to(logp.dtype)
        adv = batch.advantages.to(logp.dtype)
        terms = policy_loss_terms(logp, old_logp, ref_logp, adv, mask, aggregation=loss.aggregation, counts=counts,
                                  beta=loss.beta, eps_low=loss.eps_low, eps_high=loss.eps_high,
                                  kl_bias_correction=loss.kl_bias_correction)
        if loss.algorithm == "balanced" and loss.balance == "prompt":
            positives, negatives = terms.by_group(self.cfg.rollout.group_size)
            out = balance_per_prompt(list(positives), list(negatives), terms.kl, self.params, eps=loss.balance_eps,
                                     cap=loss.balance_cap, reduce=all_reduce_sum)
            return terms, Gradients(positive=out.positive, negative=out.negative, balanced=out)
        parts = []
        if loss.algorithm != "self_distillation" or first:   # self-distillation: g± measured once per round
            parts = [terms.positive, terms.negative, terms.kl]
        if loss.algorithm == "self_distillation":
            parts.append(self_distillation_loss(logp, adv, mask, weighting=loss.distill_weighting,
                                                aggregation=loss.aggregation, counts=counts, kept_tokens=kept_tokens))
        grads = split_gradients(parts, self.params, reduce=all_reduce_sum)
        distill = grads.pop() if loss.algorithm == "self_distillation" else None
        return terms, Gradients(*(grads or [None, None, None]), distill=distill)

    def train_step(self) -> dict[str, float]:
        """One round (steps 1-5 of the module docstring); returns its global metrics."""
        cfg, info = self.cfg, self.info
        rows = self.sampler.indices(self.step)[rank_slice(cfg.rollout.prompts_per_step, info)]
        batch = collect(self.policy, self.task, self.train_problems, rows, step=self.step, seed=cfg.seed,
                        rollout=cfg.rollout)
        counts, stats = self._global_sizes(batch)
        with torch.no_grad():
            ref_logp = rollout_logprobs(self.reference, batch) if cfg.loss.beta > 0 else None
        old_logp, record = None, {}
        for it in range(cfg.loss.inner_iterations):
            logp = rollout_logprobs(self.policy, batch)
            old_logp = logp.detach() if old_logp is None else old_logp
            terms, grads = self._gradients(batch, logp, old_logp, ref_logp, counts, int(stats["kept_tokens"]),
                                           first=it == 0)
            gradient, scale = ALGORITHMS[cfg.loss.algorithm](grads, cfg.loss)
            assign_gradient(self.params, gradient)
            clip = cfg.optim.grad_clip
            grad_norm = float(nn.utils.clip_grad_norm_(self.params, clip if clip is not None else float("inf")))
            if it == 0:
                record = self._first_iteration_metrics(terms, grads.positive, grads.negative, scale, grad_norm, logp,
                                                       ref_logp, batch)
            if not math.isfinite(grad_norm):  # the gradients are summed over processes: the same on every rank
                self.optimizer.zero_grad(set_to_none=True)
                if cfg.train.on_nonfinite == "stop":
                    raise NonFiniteLossError(self._non_finite_message(grad_norm, it, float(terms.total.detach())))
                self.skipped += 1  # on_nonfinite: skip -- no update from this iteration
                continue
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        self.sampled_tokens += stats["sampled_tokens"]
        return {**stats, **record, "sampled_tokens": self.sampled_tokens, "skipped_steps": self.skipped}

    def _non_finite_message(self, grad_norm: float, iteration: int, loss: float) -> str:
        last = ckpt.latest_checkpoint(self.run_dir)
        return (f"non-finite gradient norm ({grad_norm}) at round {self.step + 1}, inner iteration {iteration + 1} of "
                f"{self.cfg.loss.inner_iterations} (this process's loss {loss}); train.on_nonfinite=stop, so the run "
                f"stops before this update. The newest checkpoint is "
                f"{last if last is not None else 'none (no checkpoint yet)'}; lower loss.beta "
                f"({self.cfg.loss.beta:g}) or optim.lr ({self.cfg.optim.lr:g}) and start again (or --resume), or "
                f"--set train.on_nonfinite=skip to skip such steps")

    def _first_iteration_metrics(self, terms, g_pos, g_neg, scale, grad_norm, logp, ref_logp, batch) -> dict:
        mask = batch.completion_mask.to(logp.dtype)
        ref = ref_logp if ref_logp is not None else rollout_logprobs_nograd(self.reference, batch)
        kl = all_reduce_sum(torch.stack([(k3_kl(logp.detach(), ref) * mask).sum().double(), mask.sum().double()]))
        loss = all_reduce_sum(terms.total.detach().double().reshape(1))
        n_pos, n_neg = float(torch.linalg.vector_norm(g_pos)), float(torch.linalg.vector_norm(g_neg))
        return {"loss": float(loss[0]), "grad_norm": grad_norm, "g_pos_norm": n_pos, "g_neg_norm": n_neg,
                "g_neg_over_g_pos": n_neg / n_pos if n_pos > 0 else None, "neg_scale": scale,
                "kl": float(kl[0] / max(float(kl[1]), 1.0)), "lr": self.optimizer.param_groups[0]["lr"]}

    # ------------------------------------------------------------ evaluation and the run
    def evaluate(self) -> float | None:
        """Held-out pass@1: ``eval_samples`` completions per held-out prompt, graded (rank 0, a fixed seed)."""
        if not self.eval_problems:
            return None
        value = None
        if self.info.is_main:
            t = self.cfg.train
            settings = SamplingSettings(num_samples=t.eval_samples, temperature=t.eval_temperature,
                                        max_new_tokens=self.max_len, batch_size=t.eval_batch_size,
                                        seed=sample_seed(self.cfg.seed, 0, 0, EVAL_STREAM))
            out = sample_completions(self.policy, [p.prompt for p in self.eval_problems], settings,
                                     eos_token_id=self.task.eos_id, pad_token_id=self.task.pad_id)
            value = float(np.mean([[score_response(self.task, p, r)[1] for r in rs]
                                   for p, rs in zip(self.eval_problems, out.responses)]))
            self.log.write({"step": self.step, "split": "eval", "pass@1": value,
                            "sampled_tokens": self.sampled_tokens})
        return broadcast_object(value)

    def run(self) -> dict:
        t = self.cfg.train
        if self.step == t.steps and (self.run_dir / SUMMARY_FILE).is_file():
            barrier()
            return json.loads((self.run_dir / SUMMARY_FILE).read_text())
        bar = tqdm(total=t.steps, initial=self.step, desc=self.cfg.name, disable=not (self.info.is_main and t.progress))
        resume = f"assocmem rl CONFIG --resume ({self.run_dir})"
        with out_of_memory_guard(self.run_dir, self._where, self.memory_settings, resume):
            if self.step == 0:  # the bar is up first: the step-0 held-out evaluation samples for a while
                bar.set_postfix_str("held-out evaluation before round 1")
                self.evaluate()
                bar.set_postfix_str("")
            clock = time.perf_counter()
            with interrupt_after_step(lambda: notice_interrupt(self.info, self.cfg.name, self.step)) as interrupted:
                while self.step < t.steps:
                    if stop_everywhere(self.info, interrupted()):
                        bar.close()
                        raise save_on_interrupt(self.run_dir, self.step, t.steps, self.save, self.log, resume)
                    self._one_step(bar, clock)
                    clock = time.perf_counter()
            bar.close()
            return self.finish()

    def _where(self) -> str:
        steps = self.cfg.train.steps
        return f"in round {self.step + 1} of {steps}" if self.step < steps else "in the final evaluation"

    def memory_settings(self) -> list[str]:
        """What to lower after running out of memory, with the values this run has."""
        r, t = self.cfg.rollout, self.cfg.train
        return [f"rollout.prompts_per_step (now {r.prompts_per_step})", f"rollout.group_size (now {r.group_size})",
                f"train.eval_batch_size (now {t.eval_batch_size})"]

    def _one_step(self, bar, clock: float) -> None:
        """One update with its logging, evaluation and checkpoint on schedule."""
        t = self.cfg.train
        metrics = self.train_step()
        self.elapsed += time.perf_counter() - clock
        bar.update(1)
        if self.log is not None and (self.step % t.log_every == 0 or self.step == t.steps):
            self.log.write({"step": self.step, "split": "train", **metrics, "elapsed_s": self.elapsed})
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", ratio=f"{metrics['g_neg_over_g_pos'] or 0:.2f}")
        if t.eval_every and self.step % t.eval_every == 0 and self.step < t.steps:
            self.evaluate()
        if t.checkpoint_every and self.step % t.checkpoint_every == 0 and self.step < t.steps:
            self.save()

    def finish(self) -> dict:
        final = self.evaluate()
        self.save()
        summary = {"name": self.cfg.name, "steps": self.step, "sampled_tokens": self.sampled_tokens,
                   "train_seconds": self.elapsed, "world_size": self.info.world_size,
                   "algorithm": self.cfg.loss.algorithm, "aggregation": self.cfg.loss.aggregation,
                   "reference": {"source": self.reference_source, "sha256": self.reference_digest},
                   "model": model_description(self.policy), "eval_pass@1": final}
        if self.info.is_main:
            self.policy.save_pretrained(self.run_dir / "final")
            (self.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
            self.log.close()
            plot_rl_curves(self.run_dir)
        barrier()
        return summary


def _on_main(info, fn):
    """``fn()`` on rank 0 and its value on every rank; a ValueError / OSError there is raised on every rank."""
    result, failure = ("ok", None), None
    if info.is_main:
        try:
            result = ("ok", fn())
        except (ValueError, OSError) as err:
            result, failure = ("error", f"{type(err).__name__}: {err}"), err
    status, payload = broadcast_object(result)
    if failure is not None:
        raise failure
    if status == "error":
        raise RuntimeError(f"rank 0 failed: {payload}")
    return payload


@torch.no_grad()
def rollout_logprobs_nograd(model, batch: Rollouts) -> torch.Tensor:
    return rollout_logprobs(model, batch)


def train_rl(cfg: RLConfig, *, resume: bool = False, overwrite: bool = False) -> dict:
    """Run the RL config (joining torchrun's process group if launched by torchrun); returns the summary."""
    info = init_distributed(cfg.train.device)
    threads = torch.get_num_threads()
    try:
        if cfg.train.threads is not None:
            torch.set_num_threads(cfg.train.threads)
        run_dir = Path(_on_main(info, lambda: str(check_rl_run_dir(cfg, resume=resume, overwrite=overwrite))))
        return RLTrainer(cfg, info, run_dir, resume=resume, overwrite=overwrite).run()
    finally:
        torch.set_num_threads(threads)
        shutdown()
