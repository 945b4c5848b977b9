"""Code generation with test-guided search: a sandbox that runs generated programs against their
tests (``run_tests``), Python-syntax pruning of program prefixes (``syntax``), and ``solve`` /
``TestGuided``, which search the LM's token tree for a program that passes the visible tests
(Planning-Guided Transformer Decoding, Zhang et al. 2023).

Modules by stage. The sandbox: ``sandbox`` (``run_tests``, the driver of one run),
``sandbox_host`` (confinement set up on the host, cleanup), ``sandbox_child`` (the runner sent to
the child process, its result stream), ``sandbox_report`` (result types, the report), ``seccomp``
(the BPF filter, a text the child runs) and ``runner/`` (the parts of the child's one script). The
search: ``suite`` (tests -> cases), ``syntax`` (prefix checks), ``code_lm`` (the LM proxy of a
search), ``guided`` (``TestGuided``) and ``problem`` (``solve``, ``Solution``).
"""

from trellis.codegen.guided import SEARCHES, Rewarded, TestGuided, lookup_and_recycling_rollout, prompt_lookup_rollout
from trellis.codegen.problem import Solution, entry_point_of, solve, visible_and_held_out
from trellis.codegen.sandbox import CaseResult, SandboxError, TestReport, run_tests
from trellis.codegen.suite import TestCase, TestSuite, parse_tests, split_tests
from trellis.codegen.syntax import FunctionScan, PrefixCheck, check_prefix, extract_program, function_end, scan_function

__all__ = ["SEARCHES", "CaseResult", "FunctionScan", "PrefixCheck", "Rewarded", "SandboxError", "Solution",
           "TestCase", "TestGuided", "TestReport", "TestSuite", "check_prefix", "entry_point_of", "extract_program",
           "function_end", "lookup_and_recycling_rollout", "parse_tests", "prompt_lookup_rollout", "run_tests",
           "scan_function", "solve", "split_tests", "visible_and_held_out"]
