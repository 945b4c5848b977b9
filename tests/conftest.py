"""Shared fixtures. The Gemma model loads once per session (first run converts it: ~1-2 min)."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def gemma():
    """The embedded default model handle (trellis.models.load())."""
    from trellis.models import load

    return load()
