"""Code generation with test-guided search: a sandbox that runs generated programs against their
tests (``run_tests``), Python-syntax pruning of program prefixes (``syntax``), and
``trellis.codegen.solve`` (``solve``, ``TestGuided``), which searches the LM's token tree for a
program that passes the visible tests (Planning-Guided Transformer Decoding, Zhang et al. 2023).

The search part is imported from its module (the function ``solve`` shares the module's name):
``from trellis.codegen.solve import solve, TestGuided``.
"""

from trellis.codegen.sandbox import CaseResult, SandboxError, TestReport, run_tests
from trellis.codegen.suite import TestCase, TestSuite, parse_tests, split_tests
from trellis.codegen.syntax import FunctionScan, PrefixCheck, check_prefix, extract_program, function_end, scan_function

__all__ = ["CaseResult", "FunctionScan", "PrefixCheck", "SandboxError", "TestCase", "TestReport", "TestSuite",
           "check_prefix", "extract_program", "function_end", "parse_tests", "run_tests", "scan_function", "split_tests"]
