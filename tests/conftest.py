"""Shared fixtures. The Gemma model loads once per session (first run converts it: ~1-2 min)."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_threads(request):
    """Tiny-model tests run single-threaded: on a 2-core machine, 2 threads made small tensor ops
    ~14x slower under load (10 BestOfN searches: 1.12 s vs 0.08 s). Gemma tests use 2 threads."""
    want = max(1, min(2, os.cpu_count() or 1)) if request.node.get_closest_marker("model") else 1
    before = torch.get_num_threads()
    torch.set_num_threads(want)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def gemma():
    """The embedded default model handle (trellis.models.load())."""
    from trellis.models import load

    return load()
