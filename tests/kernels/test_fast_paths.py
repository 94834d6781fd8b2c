"""The CPU fast paths (kernels/model/cpu_fast.py): chosen by what the CPU runs, behind one switch, equal to the textbook.

The oneDNN bf16 linear crashed every bf16 path on an AVX2-only CPU (no AVX-512): a test below
makes it raise exactly as it does there, so the fallback is proven on every machine.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from factories import make_tiny_hf_llama, make_tiny_model

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, Transformer, generate
from kvcourse.kernels.engine.generate import as_transformer
from kvcourse.kernels.memory.caches import NoCacheBackend
from kvcourse.kernels.model import cpu_fast, layers
from kvcourse.syllabus import REPO_ROOT

pytestmark = pytest.mark.usefixtures("fast_paths_on", "one_cpu_thread")
AVX2_ERROR = ("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw, "
              "avx512vl and avx512dq")
PROMPT = [5, 17, 33, 42, 61, 8, 90, 12]


@pytest.fixture
def no_onednn(monkeypatch):
    """oneDNN's bf16 weight packing raises as it does on an AVX2-only CPU; the probe and its warning start fresh."""
    def refuse(*args, **kwargs):
        raise RuntimeError(AVX2_ERROR)

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    cpu_fast.onednn_bf16_linear.cache_clear()
    cpu_fast._say_once.cache_clear()
    yield
    monkeypatch.undo()
    cpu_fast.onednn_bf16_linear.cache_clear()
    cpu_fast._say_once.cache_clear()


def test_the_switch_reads_the_argument_and_the_environment(monkeypatch):
    monkeypatch.delenv(cpu_fast.FAST_PATHS_ENV, raising=False)
    assert cpu_fast.fast_paths_mode("auto") == "auto" and cpu_fast.fast_paths_mode("off") == "off"
    for value in ("0", "off", "OFF", "false"):
        monkeypatch.setenv(cpu_fast.FAST_PATHS_ENV, value)
        assert cpu_fast.fast_paths_mode("auto") == "off"
    monkeypatch.setenv(cpu_fast.FAST_PATHS_ENV, "1")
    assert cpu_fast.fast_paths_mode("auto") == "auto"
    monkeypatch.setenv(cpu_fast.FAST_PATHS_ENV, "fast please")
    with pytest.raises(ValueError, match="KVCOURSE_FAST_PATHS='fast please' is not understood: set it to 0"):
        cpu_fast.fast_paths_mode("auto")
    monkeypatch.delenv(cpu_fast.FAST_PATHS_ENV)
    with pytest.raises(ValueError, match="fast_paths must be one of"):
        cpu_fast.fast_paths_mode("on")
    with pytest.raises(ValueError, match="fast_paths must be one of"):
        EngineConfig(fast_paths="fast")


def test_accelerate_swaps_in_twins_that_share_the_weights_and_swaps_back():
    model = make_tiny_model(tie_word_embeddings=True)
    params = {name: p.data_ptr() for name, p in model.named_parameters(remove_duplicate=False)}
    assert model.fast_paths == () and type(model.lm_head) is layers.Linear
    model.accelerate()
    assert all(path.on for path in model.fast_paths) and len(model.fast_paths) == 3
    assert type(model.lm_head) is cpu_fast.PackedLinear and type(model.rotary) is cpu_fast.FastRotaryEmbedding
    assert type(model.layers[0].input_layernorm) is cpu_fast.FusedRMSNorm
    assert {name: p.data_ptr() for name, p in model.named_parameters(remove_duplicate=False)} == params
    assert model.lm_head.weight is model.embed_tokens.weight, "the tie survives the swap"
    model.accelerate("off")
    assert not any(path.on for path in model.fast_paths)
    assert {type(m) for m in model.modules()} & {cpu_fast.PackedLinear, cpu_fast.FusedRMSNorm,
                                                 cpu_fast.FastRotaryEmbedding} == set()
    assert {name: p.data_ptr() for name, p in model.named_parameters(remove_duplicate=False)} == params


def test_the_environment_switch_turns_every_fast_path_off(monkeypatch):
    monkeypatch.setenv(cpu_fast.FAST_PATHS_ENV, "0")
    model = as_transformer(make_tiny_hf_llama())  # what generate(hf_model, ...) and the lessons do
    assert type(model.lm_head) is layers.Linear
    assert all(not path.on and "KVCOURSE_FAST_PATHS=0" in path.why for path in model.fast_paths)


@pytest.mark.parametrize("cache", ["none", "contiguous", "paged", "int8"])
def test_fp32_tokens_are_identical_with_and_without_the_fast_paths(cache):
    hf = make_tiny_hf_llama(max_position_embeddings=256)
    fast, textbook = as_transformer(hf, "auto"), as_transformer(hf, "off")
    expected = generate(textbook, PROMPT, 40, cache=cache, eos_token_id=[]).tokens
    assert len(set(expected)) > 5
    assert generate(fast, PROMPT, 40, cache=cache, eos_token_id=[]).tokens == expected


def test_generate_and_the_engine_take_the_switch():
    hf = make_tiny_hf_llama()
    model = Transformer.from_hf(hf).accelerate()
    LLMEngine(model, EngineConfig(fast_paths="off"))
    assert type(model.lm_head) is layers.Linear, "EngineConfig(fast_paths='off') runs the textbook model"
    generate(model, PROMPT, 2, fast_paths="auto")
    assert type(model.lm_head) is cpu_fast.PackedLinear
    engine = LLMEngine(model)  # None: the model as it is given
    assert type(engine.model.lm_head) is cpu_fast.PackedLinear
    assert engine.generate([PROMPT], SamplingParams(max_new_tokens=4))[0].tokens == generate(model, PROMPT, 4).tokens


def test_bf16_falls_back_when_onednn_cannot_run_and_says_so_once(no_onednn):
    hf = make_tiny_hf_llama(dtype=torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = Transformer.from_hf(hf).accelerate()
        Transformer.from_hf(hf).accelerate()  # a second model: no second warning
        result = generate(model, PROMPT, 12, eos_token_id=[])
    said = [w for w in caught if issubclass(w.category, cpu_fast.FastPathFallback)]
    assert len(said) == 1, [str(w.message) for w in said]
    assert "does not run on this CPU: " + AVX2_ERROR in str(said[0].message)
    linear = model.layers[0].self_attn.qkv_proj
    packed, onednn = linear.packed_weight()
    assert not onednn and torch.equal(packed, linear.weight.t())
    assert "W^T copy" in str(model.fast_paths[0]) and AVX2_ERROR in model.fast_paths[0].why
    assert len(result.tokens) == 12
    textbook = Transformer.from_hf(hf).accelerate("off")
    ids = torch.tensor(PROMPT)
    with torch.no_grad():  # a decode-sized pass (8 rows) takes the packed path; equal within bf16 rounding
        fast_logits = model(ids, torch.arange(8), NoCacheBackend()).float()
        ref_logits = textbook(ids, torch.arange(8), NoCacheBackend()).float()
    torch.testing.assert_close(fast_logits, ref_logits, rtol=0, atol=0.05 * ref_logits.abs().max().item())


def test_the_probe_also_catches_a_failing_product(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("could not create a primitive descriptor for an inner product forward propagation")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", refuse)
    cpu_fast.onednn_bf16_linear.cache_clear()
    try:
        ok, why = cpu_fast.onednn_bf16_linear()
        assert not ok and "could not create a primitive descriptor" in why
    finally:
        monkeypatch.undo()
        cpu_fast.onednn_bf16_linear.cache_clear()


def test_the_report_says_what_runs_on_another_device():
    report = cpu_fast.fast_path_report(torch.float32, "cuda")
    assert all(not path.on and "on cuda" in path.why for path in report)
    assert "W^T" in cpu_fast.fast_path_report(torch.float32)[0].why


def test_no_cpu_specific_op_outside_the_fast_path_module():
    """torch.ops.mkldnn is the op that crashed on AVX2: it may appear in cpu_fast.py and nowhere else."""
    sources = [p for folder in ("kernels", "course", "simulators", "quizzes", "benchmarks")
               for p in (REPO_ROOT / folder).rglob("*.py")]
    offenders = [str(p.relative_to(REPO_ROOT)) for p in sources
                 if "torch.ops.mkldnn" in p.read_text() and p != Path(cpu_fast.__file__).resolve()]
    assert offenders == []
    assert len(sources) > 50


def test_doctor_names_the_fallback(no_onednn, monkeypatch):
    from kvcourse.doctor import check_fast_paths

    monkeypatch.setenv("KVCOURSE_DEVICE", "cpu")
    monkeypatch.setenv("KVCOURSE_DTYPE", "bfloat16")
    monkeypatch.delenv(cpu_fast.FAST_PATHS_ENV, raising=False)
    heading, linear, *_ = check_fast_paths()
    assert heading.ok and "for bfloat16 on cpu" in heading.detail and "KVCOURSE_FAST_PATHS=0" in heading.detail
    assert linear.detail.startswith("packed linear: on (W^T copy: oneDNN's bf16 linear does not run on this CPU")
    monkeypatch.setenv(cpu_fast.FAST_PATHS_ENV, "maybe")
    assert not check_fast_paths()[0].ok, "a setting the switch does not understand is a failed check, not a crash"
