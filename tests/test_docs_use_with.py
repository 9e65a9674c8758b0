"""Every example of docs/use-with.md runs as written: the setup block, then the section's block, in a
fresh folder and a fresh process (trainers set process-wide state). A section whose package is not
installed is skipped with the reason."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "use-with.md"
SETUP = "Setup (every example starts from it)"
# section -> the packages its block imports besides the suite's own
NEEDS = {"TRL: GRPOTrainer": ["trl"], "TRL: SFTTrainer with packing": ["trl"],
         "transformers' Trainer with packing": ["accelerate"], "lm-evaluation-harness": ["lm_eval"],
         "An assocmem layer inside your own model (FLA's layer signature)": []}
# lm-eval's example reads a task folder my_tasks/ (the user's); here a local multiple-choice task
MY_TASK = ("task: my_task\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
           'test_split: test\noutput_type: multiple_choice\ndoc_to_text: "{{{{question}}}}"\n'
           'doc_to_choice: "{{{{choices}}}}"\ndoc_to_target: "{{{{answer}}}}"\nmetric_list:\n  - metric: acc\n')


def sections() -> dict[str, str]:
    """The page's python blocks by the '## ' heading they stand under (one block per section)."""
    out = {}
    for part in PAGE.read_text().split("\n## ")[1:]:
        heading, body = part.split("\n", 1)
        blocks = re.findall(r"```python\n(.*?)```", body, flags=re.S)
        assert len(blocks) == 1, (heading, len(blocks))
        out[heading.strip()] = blocks[0]
    return out


def test_every_section_is_run():
    assert set(sections()) == {SETUP, *NEEDS}


@pytest.mark.parametrize("section", NEEDS)
def test_the_example_runs_as_written(section, tmp_path):
    for package in NEEDS[section]:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed (the [dev] / [eval] extras)")
    if section == "lm-evaluation-harness":
        (tmp_path / "my_tasks").mkdir()
        data = tmp_path / "my_tasks" / "data.jsonl"
        data.write_text('{"question": "what is the cat ?", "choices": ["sat", "ran"], "answer": 0}\n')
        (tmp_path / "my_tasks" / "my_task.yaml").write_text(MY_TASK.format(data=data))
    blocks = sections()
    (tmp_path / "example.py").write_text(blocks[SETUP] + "\n" + blocks[section])
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # the assocmem this suite imports
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
