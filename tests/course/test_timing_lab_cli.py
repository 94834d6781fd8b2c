"""`kvcourse timing-lab` on a tiny random model saved to disk: outputs, token check, bad arguments (lesson 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from factories import make_tiny_hf_llama
from test_timing_lab import make_word_tokenizer

import kvcourse.timing_lab.runners as runners
from kvcourse.cli import main
from kvcourse.kernels.engine.threads import apply_thread_policy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_hf_llama().save_pretrained(folder)
    make_word_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()
    yield
    apply_thread_policy(threads)


def lab(model_dir, *extra: str) -> int:
    return main(
        [
            "timing-lab",
            "--model",
            str(model_dir),
            "--lengths",
            "2,4",
            "--repeats",
            "2",
            "--no-progress",
            "--device",
            "cpu",
            *extra,
        ]
    )


def test_table_json_and_png(model_dir, tmp_path, capsys):
    json_path, png_path = tmp_path / "lab.json", tmp_path / "lab.png"
    assert (
        lab(model_dir, "--lengths", "3", "6", "--json", str(json_path), "--plot", str(png_path), "--threads", "1") == 0
    )
    out = capsys.readouterr().out
    assert "with cache (s)" in out and "without cache (s)" in out and "speedup" in out
    assert "| 1 threads" in out and "transformers " in out and "kvcourse " in out
    assert "\n         3 |" in out and "\n         6 |" in out
    data = json.loads(json_path.read_text())
    assert data["header"]["lengths"] == [3, 6] and data["header"]["threads"] == 1
    assert data["header"]["device"] == "cpu" and data["header"]["dtype"] == "float32"
    assert data["tokens_match"] is True and not data["interrupted"]
    assert len(data["runs"]) == 4 and all(len(r["seconds"]) == 2 for r in data["runs"])
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_different_tokens_fail_loudly(model_dir, monkeypatch, capsys):
    real = runners.hf_runner

    def broken_hf_runner(model, prompt_ids, use_cache, pad_token_id):
        run = real(model, prompt_ids, use_cache, pad_token_id)
        if use_cache:
            return run
        return lambda n: run(n)[:-1] + [(run(n)[-1] + 1) % 96]  # the last token is wrong

    monkeypatch.setattr(runners, "hf_runner", broken_hf_runner)
    assert lab(model_dir) == 1
    err = capsys.readouterr().err
    assert "TOKENS DIFFER" in err
    assert "hf-no-cache at length 2: first difference at new token #1" in err
    assert "hf-no-cache at length 4: first difference at new token #3" in err


def test_ctrl_c_reports_what_finished(model_dir, monkeypatch, tmp_path, capsys):
    real = runners.hf_runner

    def interrupted_hf_runner(model, prompt_ids, use_cache, pad_token_id):
        run = real(model, prompt_ids, use_cache, pad_token_id)

        def maybe_interrupt(n):
            if n == 4:
                raise KeyboardInterrupt
            return run(n)

        return maybe_interrupt

    monkeypatch.setattr(runners, "hf_runner", interrupted_hf_runner)
    json_path, png_path = tmp_path / "part.json", tmp_path / "part.png"
    assert lab(model_dir, "--json", str(json_path), "--plot", str(png_path)) == 130
    out = capsys.readouterr().out
    assert "interrupted" in out and "\n         2 |" in out and "\n         4 |" not in out
    data = json.loads(json_path.read_text())
    assert data["interrupted"] is True and data["completed_lengths"] == [2]
    assert png_path.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lengths", "16", "-4"], "--lengths: -4 is not a positive number of tokens"),
        (["--lengths", "16,abc"], "--lengths: 'abc' is not a whole number"),
        (["--repeats", "0"], "repeats must be a whole number >= 1, got 0"),
        (["--threads", "0"], "--threads must be at least 1"),
        (["--dtype", "float8"], "--dtype must be one of float32, bfloat16"),
        (["--json", "/no/such/folder/out.json"], "--json: cannot write /no/such/folder/out.json"),
        (["--plot", "out.xyz"], "--plot: 'out.xyz' needs a picture extension"),
        (["--model", "no-such-org/no-such-model"], "Could not load the model 'no-such-org/no-such-model'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["timing-lab", "--no-progress", *args]) == 2
    err_lines = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("kvcourse timing-lab: error:")
    ]
    assert len(err_lines) == 1 and message in err_lines[0]


def test_output_path_under_a_file_is_rejected(tmp_path, capsys):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    assert main(["timing-lab", "--json", str(blocker / "out.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_script_error_has_no_traceback():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "kvcourse.cli", "timing-lab", "--lengths", "-4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "kvcourse timing-lab: error: --lengths: -4 is not a positive number of tokens"
    ]
    assert "Traceback" not in proc.stderr


def test_engine_joins_the_table_and_matches_hf(model_dir, tmp_path, capsys):
    from kvcourse.timing_lab.runners import engine_cache_modes

    modes = engine_cache_modes()
    assert modes[:2] == ("none", "contiguous")
    json_path = tmp_path / "engine.json"
    assert lab(model_dir, "--engine", "--json", str(json_path)) == 0
    out = capsys.readouterr().out
    for mode in modes:
        assert f"engine {mode} (s)" in out
    assert "engine speedup" in out
    data = json.loads(json_path.read_text())
    assert data["tokens_match"] is True
    assert {r["backend"] for r in data["runs"]} == {"hf-cache", "hf-no-cache", *(f"engine-{m}" for m in modes)}


def test_engine_with_different_tokens_fails(model_dir, monkeypatch, capsys):
    real = runners.engine_runner

    def broken_engine_runner(model, prompt_ids, cache):
        run = real(model, prompt_ids, cache)
        return run if cache != "contiguous" else (lambda n: [(t + 1) % 96 for t in run(n)])

    monkeypatch.setattr(runners, "engine_runner", broken_engine_runner)
    assert lab(model_dir, "--engine") == 1
    assert "engine-contiguous at length 2: first difference at new token #0" in capsys.readouterr().err


def test_bfloat16_is_stated_in_the_header(model_dir, capsys):
    code = lab(model_dir, "--dtype", "bfloat16", "--lengths", "3", "--repeats", "1")
    captured = capsys.readouterr()
    assert "| bfloat16 |" in captured.out
    # bf16 rounding may flip a near-tie between the two sides; then the lab must say so and suggest fp32.
    assert code == 0 or (code == 1 and "try --dtype float32" in captured.err)
