"""The CPU fast paths (kernels/model/cpu_fast.py, products.py): chosen by measurement, behind one switch, equal
to the textbook.

oneDNN's bf16 linear cannot run on an AVX2-only CPU, and there the W^T copy that replaced it was 14x
slower than F.linear: each product is forced below and tested equal to the textbook, the choice is
tested on given timings, and an emulated AVX2 CPU runs the whole selection in a subprocess, so what
an AVX2 user gets is proven on every machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from factories import make_tiny_hf_llama, make_tiny_model

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, Transformer, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.engine.generate import as_transformer
from kvcourse.kernels.model import cpu_fast, layers, products
from kvcourse.syllabus import REPO_ROOT

pytestmark = pytest.mark.usefixtures("fast_paths_on", "one_cpu_thread")
AVX2_ERROR = (
    "mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"
)
PROMPT = [5, 17, 33, 42, 61, 8, 90, 12]


@pytest.fixture
def no_onednn(monkeypatch):
    """oneDNN's bf16 weight packing raises as it does on an AVX2-only CPU; the probe and its warning start fresh."""

    def refuse(*args, **kwargs):
        raise RuntimeError(AVX2_ERROR)

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    _forget_choices()
    yield
    monkeypatch.undo()
    _forget_choices()


def _forget_choices() -> None:
    products.onednn_bf16_linear.cache_clear()
    products._measured.cache_clear()
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
    assert type(model.lm_head) is cpu_fast.FastLinear and type(model.rotary) is cpu_fast.FastRotaryEmbedding
    assert type(model.layers[0].input_layernorm) is cpu_fast.FusedRMSNorm
    assert {name: p.data_ptr() for name, p in model.named_parameters(remove_duplicate=False)} == params
    assert model.lm_head.weight is model.embed_tokens.weight, "the tie survives the swap"
    model.accelerate("off")
    assert not any(path.on for path in model.fast_paths)
    assert {type(m) for m in model.modules()} & {
        cpu_fast.FastLinear,
        cpu_fast.FusedRMSNorm,
        cpu_fast.FastRotaryEmbedding,
    } == set()
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
    off = LLMEngine(model, EngineConfig(fast_paths="off"))
    assert type(off.model.lm_head) is layers.Linear, "EngineConfig(fast_paths='off') runs the textbook model"
    assert type(model.lm_head) is cpu_fast.FastLinear, "on a twin: the model given is left as it is"
    generate(model.accelerate("off"), PROMPT, 2, fast_paths="auto")
    assert type(model.lm_head) is cpu_fast.FastLinear
    engine = LLMEngine(model)  # None: the model as it is given
    assert type(engine.model.lm_head) is cpu_fast.FastLinear
    assert engine.generate([PROMPT], SamplingParams(max_new_tokens=4))[0].tokens == generate(model, PROMPT, 4).tokens


def test_bf16_never_takes_onednn_where_it_cannot_run_and_needs_no_warning(no_onednn):
    hf = make_tiny_hf_llama(dtype=torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = Transformer.from_hf(hf).accelerate()
        result = generate(model, PROMPT, 12, eos_token_id=[])
    assert not [w for w in caught if issubclass(w.category, cpu_fast.FastPathFallback)], (
        "a measured choice, no fallback"
    )
    chosen = {c.product for m in model.modules() if isinstance(m, cpu_fast.FastLinear) for c in m.choices()}
    assert "onednn" not in chosen and chosen <= set(products.PRODUCTS)
    assert "onednn" not in str(model.fast_paths[0]) and len(result.tokens) == 12


def _decode_logits(model: Transformer, rows: int) -> torch.Tensor:
    """Logits of ``rows`` tokens in one pass: 1 and 4 rows take the decode products, 32 a prompt's."""
    ids = torch.arange(3, 3 + rows)
    with torch.no_grad():
        return model(ids, torch.arange(rows), NoCacheBackend()).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("product", products.PRODUCTS)
def test_each_product_forced_equals_the_textbook(product, dtype, monkeypatch):
    """Whatever this CPU would choose, each product runs here and computes the textbook's logits and tokens."""
    ok, why = products.runs(product, dtype)
    if not ok:
        pytest.skip(f"{product} in {dtype}: {why}")
    monkeypatch.setenv(products.LINEAR_ENV, product)
    hf = make_tiny_hf_llama(dtype=dtype, max_position_embeddings=256, attention_bias=True)
    fast, textbook = Transformer.from_hf(hf).accelerate(), Transformer.from_hf(hf).accelerate("off")
    assert {c.product for c in fast.lm_head.choices()} == {product}
    for rows in (1, 4, 32):
        got, want = _decode_logits(fast, rows), _decode_logits(textbook, rows)
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:  # one bf16 rounding of each product apart, at most
            torch.testing.assert_close(got, want, rtol=0, atol=0.05 * want.abs().max().item())
    if dtype == torch.float32:
        expected = generate(textbook, PROMPT, 24, eos_token_id=[]).tokens
        assert generate(fast, PROMPT, 24, cache="paged", eos_token_id=[]).tokens == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("product", products.PRODUCTS)
def test_each_product_returns_rows_in_the_textbook_layout(product, dtype):
    """Row-major like F.linear's: a transposed result sent bf16 prompts on AVX2 through SDPA's slow path."""
    ok, why = products.runs(product, dtype)
    if not ok:
        pytest.skip(f"{product} in {dtype}: {why}")
    weight = torch.randn(48, 16).to(dtype)
    for shape in ((1, 16), (5, 16), (2, 40, 16), (2, products.FEW_ROWS_TILED, 16)):  # both of float32 tiles' layouts
        x = torch.randn(shape).to(dtype)
        out = products.multiply(product, x, weight, products.prepare(product, weight), None)
        assert out.shape == (*shape[:-1], 48) and out.is_contiguous(), (shape, out.stride())


def test_a_product_that_cannot_run_is_refused_with_its_reason(no_onednn, monkeypatch):
    model = make_tiny_model().to(torch.bfloat16)
    monkeypatch.setenv(products.LINEAR_ENV, "onednn")
    with pytest.raises(
        ValueError,
        match="KVCOURSE_LINEAR=onednn cannot run for torch.bfloat16: oneDNN's bf16 "
        "linear does not run on this CPU: " + AVX2_ERROR,
    ):
        model.accelerate()
    monkeypatch.setenv(products.LINEAR_ENV, "float32 tiles")
    with pytest.raises(ValueError, match="float32 tiles only help a 16-bit dtype"):
        make_tiny_model().accelerate()
    monkeypatch.setenv(products.LINEAR_ENV, "fastest")
    with pytest.raises(ValueError, match="KVCOURSE_LINEAR='fastest' is not understood: set it to one of"):
        make_tiny_model().accelerate()


def test_the_choice_is_the_fastest_by_a_margin_else_the_textbook(monkeypatch):
    """The selection on given timings: fastest wins by MARGIN; a near tie keeps F.linear; fp32 prompts keep F.linear."""
    timings = {"textbook": 1.0, "transposed": 0.5, "onednn": 0.4, "float32 tiles": 2.0}
    asked = []

    def fake(names, dtype, out_features, in_features, rows):
        asked.append((tuple(names), rows))
        return {name: timings[name] for name in names}

    monkeypatch.setattr(products, "time_products", fake)
    monkeypatch.delenv(products.LINEAR_ENV, raising=False)
    products._measured.cache_clear()
    try:
        assert products.choose(torch.float32, 64, 32, 0).product == "transposed"
        assert asked == [(("textbook", "transposed"), 1)], "only what runs in fp32 is timed, at one row"
        assert products.choose(torch.float32, 64, 32, 2).product == "textbook"  # a prompt: bit for bit HF's
        timings["transposed"] = 0.95  # 1.05x: inside the margin
        products._measured.cache_clear()
        choice = products.choose(torch.float32, 64, 32, 1)
        assert choice.product == "textbook" and "transposed 1.05x" in choice.why
        timings["float32 tiles"] = 0.3
        assert products.choose(torch.bfloat16, 64, 32, 2).product == "float32 tiles"
        assert products.row_class(1) == 0 and products.row_class(8) == 1 and products.row_class(9) == 2
    finally:
        products._measured.cache_clear()


AVX2_SCRIPT = """
import torch, warnings
warnings.simplefilter("error")
from factories import make_tiny_hf_llama
from kvcourse.kernels import Transformer, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.model import products
assert torch.backends.cpu.get_cpu_capability() == "AVX2", torch.backends.cpu.get_cpu_capability()
assert not products.onednn_bf16_linear()[0], "oneDNN's bf16 product should not run on an AVX2 CPU"
hf = make_tiny_hf_llama(dtype=torch.bfloat16, max_position_embeddings=256)
fast, textbook = Transformer.from_hf(hf).accelerate(), Transformer.from_hf(hf).accelerate("off")
for rows in (1, 4, 32):
    ids = torch.arange(3, 3 + rows)
    with torch.no_grad():
        got, want = (m(ids, torch.arange(rows), NoCacheBackend()).float() for m in (fast, textbook))
    torch.testing.assert_close(got, want, rtol=0, atol=0.05 * want.abs().max().item())
print(len(generate(fast, [5, 17, 33], 16, cache="paged", eos_token_id=[]).tokens), fast.fast_paths[0])
"""


def test_an_avx2_cpu_runs_its_own_selection_equal_to_the_textbook():
    """PyTorch and oneDNN told to use AVX2 only, as on a Zen 2 laptop: the probe, the measured choice and bf16
    decode."""
    env = {
        **os.environ,
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO_ROOT / "tests"),
    }
    env.pop(products.LINEAR_ENV, None)
    env.pop(cpu_fast.FAST_PATHS_ENV, None)
    run = subprocess.run([sys.executable, "-c", AVX2_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("16 matrix products: "), run.stdout


def test_the_probe_catches_a_failing_product_whatever_the_library_says(monkeypatch):
    """The probe reports the library's own first line, whatever it is (oneDNN words it differently per CPU)."""
    message = "an error in words no library uses 7f3a"

    def refuse(*args, **kwargs):
        raise RuntimeError(message + "\nsecond line")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", lambda weight, batch: weight)
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", refuse)
    products.onednn_bf16_linear.cache_clear()
    try:
        ok, why = products.onednn_bf16_linear()
        assert not ok and why == f"oneDNN's bf16 linear does not run on this CPU: {message}"
        assert products.runs("onednn", torch.bfloat16) == (False, why)
    finally:
        monkeypatch.undo()
        products.onednn_bf16_linear.cache_clear()


def test_the_report_says_what_runs_on_another_device():
    shapes = cpu_fast.ModelShapes(((64, 32),), 32, 8, 6)
    report = cpu_fast.fast_path_report(torch.float32, "cuda", "auto", shapes)
    assert all(not path.on and "on cuda" in path.why for path in report)
    matrix, norm, rope = cpu_fast.fast_path_report(torch.float32, "cpu", "auto", shapes)
    assert "one row: " in matrix.why and "measured" in norm.why
    assert rope.why.startswith("decode: ") and "; prompt: " in rope.why


def test_no_cpu_specific_op_outside_the_fast_path_module():
    """torch.ops.mkldnn is the op that crashed on AVX2: it may appear in products.py and nowhere else."""
    sources = [
        p
        for folder in ("kernels", "course", "simulators", "quizzes", "benchmarks")
        for p in (REPO_ROOT / folder).rglob("*.py")
    ]
    offenders = [
        str(p.relative_to(REPO_ROOT))
        for p in sources
        if "torch.ops.mkldnn" in p.read_text() and p != Path(products.__file__).resolve()
    ]
    assert offenders == []
    assert len(sources) > 50


def test_doctor_names_the_fallback(no_onednn, monkeypatch):
    from kvcourse.doctor import check_fast_paths

    monkeypatch.setenv("KVCOURSE_DEVICE", "cpu")
    monkeypatch.setenv("KVCOURSE_DTYPE", "bfloat16")
    monkeypatch.delenv(cpu_fast.FAST_PATHS_ENV, raising=False)
    heading, linear, *_ = check_fast_paths()
    assert heading.ok and "for bfloat16 on cpu" in heading.detail and "KVCOURSE_FAST_PATHS=0" in heading.detail
    assert linear.detail.startswith("matrix products: ") and "onednn" not in linear.detail
    assert "one row: " in linear.detail and "more rows: " in linear.detail
    monkeypatch.setenv(cpu_fast.FAST_PATHS_ENV, "maybe")
    assert not check_fast_paths()[0].ok, "a setting the switch does not understand is a failed check, not a crash"
