"""Fixtures shared by the mixer tests."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny float64 ops: one intra-op thread avoids a thread hand-off per small matmul."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
