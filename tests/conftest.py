"""Fixtures for every test folder.

The suite never reaches the Hugging Face Hub: HF_HUB_OFFLINE is set before anything imports
huggingface_hub (a Hub id that is not cached then fails at once with training/hub.py's message).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def one_thread():
    """One intra-op thread for tiny models: two threads hand off every small matmul (much slower when
    the cores are shared). Use with ``pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def cuda_autocast():
    """``cuda_autocast_policy`` of tests/cuda_autocast.py: CUDA autocast's casts reproduced on CPU
    (float32 norms and reductions, bf16 linears and convolutions). Use as ``with cuda_autocast():``."""
    from cuda_autocast import cuda_autocast_policy

    return cuda_autocast_policy
