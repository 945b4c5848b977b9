"""The command line's usage errors (issue 57): a search parameter given for a strategy it does not
apply to is refused by name; usage errors come before torch is imported; ``trellis --version``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trellis import __version__
from trellis.cli import SEARCH_FLAGS, STRATEGIES, main

VALUES = {"include": "Paris", "early_stopping": "true", "scorer": "mbr", "resampler": "multinomial",
          "length_penalty": "0.5", "diversity_penalty": "0.5", "lam": "0.5", "max_seconds": "2",
          "threshold": "0.5", "ess_threshold": "0.3"}


@pytest.mark.parametrize("dest", sorted(SEARCH_FLAGS))
def test_a_search_flag_for_another_strategy_is_a_usage_error(dest, capsys):
    flag = "--" + dest.replace("_", "-")
    value = VALUES.get(dest, "3")
    other = next(s for s in STRATEGIES if s not in SEARCH_FLAGS[dest][1] and s not in ("greedy", "sample"))
    for argv in (["generate", flag, value, "--strategy", other, "x"], ["generate", flag, value, "x"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{flag} applies to --strategy {', '.join(SEARCH_FLAGS[dest][1])}" in err, err
        assert (f"not to --strategy {other}" if "--strategy" in argv else "not to the default strategy") in err


def test_the_cli_strategy_names_are_generates():
    from trellis.search.names import STRATEGIES as NAMES

    assert STRATEGIES == tuple(NAMES)


@pytest.mark.parametrize("argv", [
    ["generate", "--strategy", "bogus", "x"],
    ["generate", "--no-such-flag", "x"],
    ["generate", "--include", "Paris", "--strategy", "beam", "x"],
    ["generate", "--max-new-tokens", "0", "x"],
    ["frobnicate"],
])
def test_usage_errors_come_before_torch_is_imported(argv):
    """Torch's import took 20-120 s on a loaded machine; a usage error must not wait for it (nor
    for a model)."""
    code = ("import sys\nfrom trellis.cli import main\ntry:\n    rc = main(%r)\nexcept SystemExit as e:\n"
            "    rc = e.code\nassert rc == 2, rc\nassert 'torch' not in sys.modules, 'torch was imported'\n" % (argv,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "error:" in r.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"trellis {__version__}"


@pytest.mark.parametrize("first", [
    "from trellis.generate import GenerationResult",  # a submodule first (trellis.codegen does this)
    "import trellis.generate",
    "from trellis import generate",  # the lazy name first
])
def test_the_package_names_stay_what_they_export_whatever_is_imported_first(first):
    """``trellis.generate`` is both a lazily exported function and the module it lives in: importing
    the module first bound the module where ``from trellis import generate`` expects the function
    (README blocks then failed with "'module' object is not callable"). In a new process, each order."""
    code = (f"{first}\nimport sys, types\nfrom trellis import generate, GenerationResult\n"
            "assert callable(generate) and not isinstance(generate, types.ModuleType), generate\n"
            "assert generate.__module__ == 'trellis.generate'\n"
            "import trellis\nassert trellis.generate is generate\n"
            "from trellis.generate import generate as g2\nassert g2 is generate\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
