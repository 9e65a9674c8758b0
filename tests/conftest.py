"""Fixtures for every test folder."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """One intra-op thread for tiny models: two threads hand off every small matmul (much slower when
    the cores are shared). Use with ``pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
