"""Local lm-evaluation-harness tasks that assocmem ships: they need no download, so ``assocmem
eval-harness RUN --tasks assocmem_copy`` runs offline on any model with a tokenizer.

    assocmem_copy   in-context copy: four random words, repeated twice, then the first three again; the
                    model chooses the fourth among it and three other words of the list (acc; chance 1/4).
                    A model that copies from its context (an induction head, an associative memory)
                    scores 1; the 32 items are drawn with a fixed seed (``copy_docs``).

lm-eval reads a task from a YAML file under ``--include_path`` whose data files it opens by path, so
``write_local_tasks(folder)`` writes each task's YAML and data there (cli/eval_harness.py does it in a
temporary folder when a requested task is one of ``LOCAL_TASKS``). Your own tasks take the same route:
a folder with ``my_task.yaml`` (``dataset_path: json`` and ``data_files`` by absolute path) passed as
``--include_path FOLDER`` (docs/compatibility.md#lm-evaluation-harness).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("red", "blue", "green", "cat", "dog", "bird", "tree", "house", "river", "stone", "moon", "sun", "book",
         "door", "milk", "bread", "hand", "foot", "ship", "road", "gold", "salt", "wind", "snow")

_YAML = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


def copy_docs(n: int = 32, *, seed: int = 0) -> list[dict]:
    """The assocmem_copy items: {"context": "w1 w2 w3 w4 w1 w2 w3 w4 w1 w2 w3", "choices": [4 words], "answer": i}."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        seq = rng.sample(WORDS, 4)
        others = rng.sample([w for w in WORDS if w not in seq], 3)
        choices = others[:]
        answer = rng.randrange(4)
        choices.insert(answer, seq[3])
        docs.append({"context": " ".join(seq + seq + seq[:3]), "choices": choices, "answer": answer})
    return docs


LOCAL_TASKS = {"assocmem_copy": copy_docs}


def write_local_tasks(folder: Path) -> Path:
    """Write every task of ``LOCAL_TASKS`` (its YAML and its data, by absolute path) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, docs in LOCAL_TASKS.items():
        data = (folder / f"{name}.jsonl").resolve()
        data.write_text("".join(json.dumps(d) + "\n" for d in docs()))
        (folder / f"{name}.yaml").write_text(_YAML.format(name=name, data=data))
    return folder
