"""The from-scratch Transformer against Hugging Face, on tiny random Llama and Qwen2 models."""

from __future__ import annotations

import pytest
import torch
from factories import make_config, make_tiny_hf_llama, make_tiny_model

from kvcourse.kernels import Transformer, costs
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.model import products

VARIANTS = [
    ("llama", {}),
    ("llama", {"tie_word_embeddings": True, "num_kv_heads": 1}),  # MQA, tied
    ("llama", {"num_kv_heads": 4}),  # MHA
    ("llama", {"attention_bias": True}),  # Llama's bias also on o_proj
    ("llama", {"hidden_size": 40, "num_heads": 4, "head_dim": 16}),  # explicit head_dim != hidden/heads
    ("qwen2", {}),
    ("qwen2", {"tie_word_embeddings": True}),
]


def ours_and_hf_logits(arch, overrides, packed, num_tokens=64, attention="sdpa"):
    hf = make_tiny_hf_llama(arch, **overrides)
    model = Transformer.from_hf(hf)
    if packed:
        model.accelerate()
    ids = torch.randint(0, hf.config.vocab_size, (num_tokens,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
        ours = model(ids, torch.arange(num_tokens), NoCacheBackend(attention))
    return ours, ref


@pytest.mark.parametrize("arch,overrides", VARIANTS)
@pytest.mark.parametrize("fast_paths", ["off", "auto"])
def test_fp32_logits_match_hugging_face(arch, overrides, fast_paths):
    ours, ref = ours_and_hf_logits(arch, overrides, fast_paths)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("attention", ["naive", "tiled", "grouped"])
def test_every_attention_gives_hf_logits(attention):
    ours, ref = ours_and_hf_logits("llama", {}, "off", attention=attention)
    assert (ours - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("fast_paths", ["off", "auto"])
def test_bf16_runs_and_stays_close_to_hf_bf16(fast_paths):
    hf = make_tiny_hf_llama(dtype=torch.bfloat16)
    model = Transformer.from_hf(hf).accelerate(fast_paths)
    assert model.dtype == torch.bfloat16
    ids = torch.arange(3, 35)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0].float()
        ours = model(ids, torch.arange(32), NoCacheBackend()).float()
    assert ours.dtype == torch.float32
    scale = ref.abs().max().item()
    assert (ours - ref).abs().max().item() <= 0.05 * scale
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean().item() >= 0.9


def test_logits_index_selects_rows():
    model = make_tiny_model()
    ids, pos = torch.arange(10, 20), torch.arange(10)
    with torch.no_grad():
        full = model(ids, pos, NoCacheBackend())
        last = model(ids, pos, NoCacheBackend(), logits_index=torch.tensor([9, 3]))
    assert torch.allclose(last, full[[9, 3]], atol=1e-5)


def test_flat_batch_of_two_sequences_equals_separate_runs():
    model = make_tiny_model()
    a, b = torch.arange(5, 12), torch.arange(40, 44)
    with torch.no_grad():
        flat = model(torch.cat([a, b]), torch.cat([torch.arange(7), torch.arange(4)]), NoCacheBackend(seq_lens=[7, 4]))
        alone_a = model(a, torch.arange(7), NoCacheBackend())
        alone_b = model(b, torch.arange(4), NoCacheBackend())
    assert torch.allclose(flat, torch.cat([alone_a, alone_b]), atol=1e-5)


def test_forward_rejects_a_2d_batch():
    model = Transformer(make_config())
    with pytest.raises(ValueError, match="1-D"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.arange(4), NoCacheBackend())


@pytest.mark.parametrize("tied", [False, True])
def test_weight_bytes_read_equal_the_cost_model(tied):
    config = make_config(tie_word_embeddings=tied)
    model = Transformer(config)
    assert model.weight_bytes_read_per_pass() == costs.weight_bytes_read_per_pass(config, 4)
    assert model.to(torch.bfloat16).weight_bytes_read_per_pass() == costs.weight_bytes_read_per_pass(config, 2)


def test_parameter_count_equals_cost_model():
    config = make_config(tie_word_embeddings=True, attention_bias=True)
    assert sum(p.numel() for p in Transformer(config).parameters()) == costs.num_parameters(config)


@pytest.mark.usefixtures("fast_paths_on")
def test_fresh_model_is_initialised_and_the_packed_copy_follows_every_weight_change():
    model = Transformer(make_config()).accelerate()
    down = model.layers[0].mlp.down_proj
    assert torch.isfinite(down.weight).all()
    assert torch.equal(down.prepared("transposed"), down.weight.t())
    with torch.no_grad():
        down.weight.mul_(2)  # an in-place write (load_state_dict does the same)
    assert torch.equal(down.prepared("transposed"), down.weight.t()), "a stale copy after an in-place write"
    model.to(torch.bfloat16)  # a new tensor of another dtype
    assert down.prepared("transposed").dtype == torch.bfloat16
    assert all(products.runs(c.product, torch.bfloat16)[0] for c in down.choices()), "chosen again for bf16"
    with torch.no_grad():
        out = model(torch.arange(4), torch.arange(4), NoCacheBackend())
        step = model(torch.tensor([5]), torch.tensor([4]), NoCacheBackend())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all() and torch.isfinite(step.float()).all()


def test_rope_table_stays_float32_after_a_cast():
    # Regression: a model.to(bfloat16) must not round the cos/sin table itself.
    model = Transformer(make_config()).to(torch.bfloat16)
    assert model.rotary.cos_table.dtype == torch.float32


@pytest.mark.gpu
def test_cuda_matches_cpu():
    hf = make_tiny_hf_llama()
    cpu = Transformer.from_hf(hf)
    gpu = Transformer.from_hf(hf.to("cuda"))
    ids = torch.arange(3, 40)
    with torch.no_grad():
        a = cpu(ids, torch.arange(37), NoCacheBackend())
        b = gpu(ids.cuda(), torch.arange(37, device="cuda"), NoCacheBackend()).cpu()
    assert (a - b).abs().max().item() <= 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("norm_class", ["RMSNorm", "FusedRMSNorm"])
def test_rms_norm_is_llamas_bit_for_bit(dtype, rows, norm_class):
    """The textbook RMSNorm and its one-call twin (torch's rms_norm) are LlamaRMSNorm exactly, at any scale."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from kvcourse.kernels.model import cpu_fast, layers

    gen = torch.Generator().manual_seed(rows)
    ours = getattr(layers, norm_class, None) or getattr(cpu_fast, norm_class)
    ours, theirs = ours(576, 1e-5), LlamaRMSNorm(576, eps=1e-5)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(576, generator=gen))
        theirs.weight.copy_(ours.weight)
    ours.to(dtype), theirs.to(dtype)
    for scale in (1e-3, 3.0, 1e3):  # from where eps matters to where it does not
        x = (torch.randn(rows, 576, generator=gen) * scale).to(dtype)
        with torch.no_grad():
            assert torch.equal(ours(x), theirs(x)), scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens", [1, 5, 9, 40])
def test_rope_is_hugging_faces_and_the_fast_rope_equals_it(num_tokens, dtype):
    """The textbook rotation is HF's apply_rotary_pos_emb bit for bit; the folded one is too, and the matrix
    per token equal up to rounding; whichever the machine's measurement picks equals it."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from kvcourse.kernels.model.fast_rope import FastRotaryEmbedding, MatrixRotation
    from kvcourse.kernels.model.layers import RotaryEmbedding

    rotary = RotaryEmbedding(64, 4096, 10000.0)
    gen = torch.Generator().manual_seed(num_tokens)
    x = torch.randn(num_tokens, 12, 64, generator=gen).to(dtype)
    positions = torch.randint(0, 4096, (num_tokens,), generator=gen)
    textbook = rotary.at(positions, dtype)
    hf_q, _ = apply_rotary_pos_emb(
        x.transpose(0, 1)[None], x.transpose(0, 1)[None], textbook.cos[:, 0][None], textbook.sin[:, 0][None]
    )  # HF's (1, heads, T, D)
    assert torch.equal(textbook(x), hf_q[0].transpose(0, 1))
    rope = FastRotaryEmbedding(64, 4096, 10000.0)
    assert torch.equal(rope.rotation("folded", positions, dtype)(x), textbook(x)), "folded: bit for bit"
    assert torch.equal(rope.rotation("textbook", positions, dtype)(x), textbook(x))
    matrix = rope.rotation("matrix", positions, dtype)
    rtol, atol = (0, 1e-5) if dtype == torch.float32 else (1.6e-2, 1e-2)  # bf16: two units in the last place
    torch.testing.assert_close(matrix(x).float(), textbook(x).float(), rtol=rtol, atol=atol)
    eye = matrix.matrix[0].float() @ matrix.matrix[0].float().T
    torch.testing.assert_close(eye, torch.eye(64), rtol=0, atol=1e-6 if dtype == torch.float32 else 2e-2)
    chosen = rope.at(positions, dtype)  # whichever form is measured fastest here for this many tokens
    assert num_tokens <= rope.matrix_rows or not isinstance(chosen, MatrixRotation), "a prompt never a matrix"
    torch.testing.assert_close(chosen(x).float(), textbook(x).float(), rtol=rtol, atol=atol)
