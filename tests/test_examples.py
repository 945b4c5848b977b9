"""Every example runs (issue 57: README and examples must not drift from the code). Each is a
script on the embedded Gemma 3 270M, run as a user runs it (marked ``model`` and ``slow``); the
two long ones with the quick options their docstrings give. ``vllm_server.py`` needs a vLLM
environment and is run there by hand (``.ci/.venv-vllm``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
QUICK = {"code_search.py": ["--max-new-tokens", "16", "--multiplier", "2"], "grammar_mask_timing.py": ["--docs", "2"]}


def test_every_example_is_listed_here():
    assert EXAMPLES and set(QUICK) <= set(EXAMPLES)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name, tmp_path):
    if name == "vllm_server.py" and importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM (.ci/.venv-vllm/bin/python examples/vllm_server.py)")
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name), *QUICK.get(name, [])], cwd=tmp_path,
                       capture_output=True, text=True, timeout=1200, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert r.returncode == 0, (r.stdout[-1500:], r.stderr[-3000:])
    assert r.stdout.strip()
