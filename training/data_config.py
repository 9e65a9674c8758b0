"""The ``data:`` section of a training config: one class per ``kind`` (``DataConfig``, ``DATA_KINDS``).

Synthetic tasks (mqar, graph_walk, selective_copy, chain_sum, graph_path, modular, needle), local text
files (``files``), problem sets (``problems``) and weighted mixtures of sources with stages (``mixture``).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, model_validator

from .config_base import Seed
from .config_base import Strict as _Strict
from .verifiable import ChainSum, GraphPath, Modular, Needle, ProblemsFile


# ---------------------------------------------------------------- data
class _DataBase(_Strict):
    num_train: int = Field(10_000, gt=0, description="training sequences generated")
    num_eval: int = Field(500, ge=0, description="evaluation sequences generated (0 = no evaluation)")
    seed: Seed = Field(0, description="seed of the training set")
    eval_seed: Seed = Field(1, description="seed of the evaluation set (must differ from seed)")

    @model_validator(mode="after")
    def _distinct_seeds(self):
        if self.seed == self.eval_seed:
            raise ValueError(f"data.seed and data.eval_seed must differ (both {self.seed}): the eval set would "
                             f"repeat the training set")
        return self


class MQARData(_DataBase):
    """Zoology's multi-query associative recall (Arora et al. 2023)."""

    kind: Literal["mqar"] = "mqar"
    seq_len: int = Field(256, gt=0, description="sequence length L")
    num_kv_pairs: int = Field(16, gt=0, description="key-value pairs K")
    vocab_size: int = Field(8192, gt=0, description="vocabulary V (keys [1, V/2), values [V/2, V))")
    power_a: float = Field(0.01, gt=0, description="query-gap power law p(i) ∝ a·i^(a−1)")
    random_non_queries: bool = Field(False, description="replace the 0 filler by random tokens")


class GraphWalkData(_DataBase):
    """Random walks on a fresh random graph per sequence (Park et al. 2025)."""

    kind: Literal["graph_walk"] = "graph_walk"
    seq_len: int = Field(256, gt=0, description="walk length in tokens")
    vocab_size: int = Field(512, gt=0, description="token ids for nodes are drawn from [0, vocab_size)")
    kinds: list[Literal["grid", "ring", "hex"]] = Field(["grid", "ring", "hex"], description="graph families")
    sizes: dict[Literal["grid", "ring", "hex"], int | tuple[int, int]] = Field(
        default_factory=dict, description="size per family (grid/hex: n or [rows, cols]; ring: nodes); "
        "default 4x4 grid, ring of 10, 3x3 hexagonal lattice")


class SelectiveCopyData(_DataBase):
    """Selective copying (Mamba §4.1.1)."""

    kind: Literal["selective_copy"] = "selective_copy"
    seq_len: int = Field(256, gt=0, description="total length: context + separator + num_tokens markers")
    num_tokens: int = Field(16, gt=0, description="data tokens to copy")
    vocab_size: int = Field(16, ge=4, description="ids 0 noise, 1 separator, 2 marker, data from [3, V)")


class ChainSumData(_DataBase, ChainSum):
    """Running sums mod 10 with a scratchpad (verifiable/chain_sum.py); loss on the response only."""

    kind: Literal["chain_sum"] = "chain_sum"


class GraphPathData(_DataBase, GraphPath):
    """A path between two nodes of a random graph given in context (verifiable/graph_path.py)."""

    kind: Literal["graph_path"] = "graph_path"


class ModularData(_Strict, Modular):
    """(a ∘ b) mod p on Nanda's split of all p² pairs (verifiable/modular.py): training rows are the
    train split, evaluation rows the test split."""

    kind: Literal["modular"] = "modular"
    seed: int = Field(0, description="seed of Nanda's split (random.Random(seed).shuffle of the p² pairs)")


class NeedleData(_DataBase, Needle):
    """Key → value needles in a random-id haystack, a query at the end (verifiable/needle.py)."""

    kind: Literal["needle"] = "needle"


class ProblemsData(_Strict, ProblemsFile):
    """A problem set in a local file (verifiable/problem_file.py): SFT rows are prompt + reference with
    the loss on the reference; ``rl`` samples its prompts; ``eval`` adds greedy answer accuracy."""

    kind: Literal["problems"] = "problems"


class FilesData(_Strict):
    """Local text/jsonl/parquet files, tokenized and packed into blocks; or, with ``prompt_field`` and
    ``response_field``, one prompt/response pair per record with the loss on the response only."""

    kind: Literal["files"] = "files"
    train_files: list[str] = Field(description="local files (.txt/.md/.jsonl/.json/.parquet), one format")
    eval_files: list[str] = Field(default_factory=list, description="held-out files (else eval_fraction)")
    eval_fraction: float = Field(0.0, ge=0, lt=1, description="fraction of training blocks held out "
                                 "(the last ones) when eval_files is empty")
    text_field: str = Field("text", description="column holding the text (json/parquet)")
    sample_by: Literal["document", "paragraph", "line"] = Field("document", description="text files: record unit")
    tokenizer: str = Field("bytes", description="'bytes' (UTF-8 bytes + EOS, 257 ids), a local HF tokenizer folder "
                           "or a Hugging Face Hub id")
    seq_len: int = Field(512, ge=2, description="block length; with prompt/response fields, the row width "
                         "(prompt + response + EOS, right-padded)")
    prompt_field: str | None = Field(None, description="json/parquet column of the prompt (set together with "
                                     "response_field): rows are prompt + response + EOS, labels -100 on the prompt")
    response_field: str | None = Field(None, description="json/parquet column of the response (with prompt_field)")
    overlong: Literal["error", "drop"] = Field("error", description="prompt/response records longer than seq_len: "
                                               "refuse the data (error) or leave them out with a warning (drop)")
    documents: Literal["separate", "joined"] = Field(
        "separate", description="packed text: 'separate' reads every document on its own (states and attention "
        "reset at each document, cu_seqlens; a document's first token is not predicted from the one before), "
        "'joined' reads a block as one sequence across the end-of-document ids")

    @model_validator(mode="after")
    def _pairs(self) -> "FilesData":
        if (self.prompt_field is None) != (self.response_field is None):
            raise ValueError("data.prompt_field and data.response_field go together; give both or neither")
        for packed_only in ("text_field", "documents"):  # a dump of a valid config holds the defaults: allowed
            default = type(self).model_fields[packed_only].default
            if self.prompt_field is not None and getattr(self, packed_only) != default:
                raise ValueError(f"data.{packed_only} is for packed text; with prompt_field/response_field leave "
                                 f"it out")
        return self


class MixtureSource(_Strict):
    """One source of a mixture: local files (text/JSONL/parquet, one format) or a local HF dataset folder
    written by ``Dataset.save_to_disk``; its records' text is tokenized once and packed at each stage's seq_len."""

    files: list[str] = Field(default_factory=list, description="local .txt/.md/.jsonl/.json/.parquet files (one "
                             "format); 'corpus:NAME' is a file of the corpus the package ships (training/corpus/)")
    dataset: str | None = Field(None, description="a folder written by datasets' save_to_disk (a Dataset, or a "
                                "DatasetDict with split set); read in memory, nothing cached")
    split: str | None = Field(None, description="the split of a DatasetDict folder")
    text_field: str | list[str] = Field("text", description="the column holding the text; a list of columns is "
                                        "joined with a newline per record (prompt and answer concatenated)")
    sample_by: Literal["document", "paragraph", "line"] = Field("document", description="text files: record unit")

    @model_validator(mode="after")
    def _one_origin(self) -> "MixtureSource":
        if bool(self.files) == (self.dataset is not None):
            raise ValueError("a mixture source needs exactly one of files (a list of local files) or dataset (a "
                             "save_to_disk folder)")
        if self.split is not None and self.dataset is None:
            raise ValueError("split is for a dataset folder (a DatasetDict); a files source has none")
        if isinstance(self.text_field, list) and not self.text_field:
            raise ValueError("text_field is an empty list; give a column name or a list of them")
        return self


class MixtureStage(_Strict):
    """From optimizer step ``step`` on (0-based: the batch of step ``step`` is the first), new weights and/or a
    new sequence length; what a stage leaves out stays as the stage before it had it."""

    step: int = Field(gt=0, description="the first step of the stage")
    weights: dict[str, float] | None = Field(None, description="source -> weight (a source left out: 0); null = "
                                             "the previous stage's weights")
    seq_len: int | None = Field(None, ge=2, description="block length from this stage on; null = unchanged")


class MixtureData(_Strict):
    """Several text sources drawn with weights, in stages (Nautile §3.1's staged curriculum): each row of the
    batch of step s comes from source i with probability weights_i / Σ weights of the stage holding s, drawn
    from numpy.random.default_rng([seed, 0, s]) (training/mixture.py), so a resumed run draws what an
    uninterrupted one does; the rows drawn per source are logged (``mix/<source>`` in log.jsonl)."""

    kind: Literal["mixture"] = "mixture"
    sources: dict[str, MixtureSource] = Field(description="source name -> its files or dataset folder")
    weights: dict[str, float] = Field(description="the first stage's weights: source -> weight ≥ 0 (a source left "
                                      "out: 0; the sum must be > 0)")
    seq_len: int = Field(512, ge=2, description="the first stage's block length")
    stages: list[MixtureStage] = Field(default_factory=list, description="later stages, by increasing step")
    tokenizer: str = Field("bytes", description="'bytes', a local HF tokenizer folder or a Hugging Face Hub id")
    documents: Literal["separate", "joined"] = Field("separate", description="as FilesData.documents")
    eval_fraction: float = Field(0.0, ge=0, lt=1, description="the last fraction of each source's records held "
                                 "out, packed at the last stage's seq_len (0 = no evaluation)")

    @model_validator(mode="after")
    def _weights_and_stages(self) -> "MixtureData":
        if not self.sources:
            raise ValueError("data.sources is empty; name at least one source")
        check_weights(self.weights, self.sources, "data.weights")
        last = 0
        for i, stage in enumerate(self.stages):
            if stage.step <= last:
                before = f"data.stages[{i - 1}].step={last}" if i else "0"
                raise ValueError(f"data.stages[{i}].step={stage.step} must be greater than {before}: stages go by "
                                 f"increasing step")
            last = stage.step
            if stage.weights is not None:
                check_weights(stage.weights, self.sources, f"data.stages[{i}].weights")
        return self

    def schedule(self) -> list[tuple[int, dict[str, float], int]]:
        """[(first step, weights of every source, seq_len)] per stage, the first at step 0."""
        out = [(0, {name: float(self.weights.get(name, 0.0)) for name in self.sources}, self.seq_len)]
        for stage in self.stages:
            weights = out[-1][1] if stage.weights is None else {n: float(stage.weights.get(n, 0.0))
                                                                 for n in self.sources}
            out.append((stage.step, weights, stage.seq_len or out[-1][2]))
        return out


def check_weights(weights: dict[str, float], sources: dict, where: str) -> None:
    """Refuse a source name that is not in ``sources``, a negative weight, or weights summing to 0 (``where``:
    the field, e.g. data.stages[1].weights)."""
    unknown = sorted(set(weights) - set(sources))
    if unknown:
        raise ValueError(f"{where} names {unknown}, which {'is' if len(unknown) == 1 else 'are'} not a source; "
                         f"sources: {sorted(sources)}")
    negative = {k: v for k, v in weights.items() if v < 0}
    if negative:
        raise ValueError(f"{where}: weights must be >= 0, got {negative}")
    if sum(weights.values()) <= 0:
        raise ValueError(f"{where}: the weights sum to {sum(weights.values())}; at least one source needs a weight > 0")


DataConfig = Annotated[Union[MQARData, GraphWalkData, SelectiveCopyData, ChainSumData, GraphPathData, ModularData,
                             NeedleData, FilesData, ProblemsData, MixtureData], Field(discriminator="kind")]
DATA_KINDS: dict[str, type[BaseModel]] = {"mqar": MQARData, "graph_walk": GraphWalkData,
                                          "selective_copy": SelectiveCopyData, "chain_sum": ChainSumData,
                                          "graph_path": GraphPathData, "modular": ModularData, "needle": NeedleData,
                                          "files": FilesData, "problems": ProblemsData, "mixture": MixtureData}
