"""Models by what SGLang is launched with (``--model-path``): a local checkpoint folder (its config.json),
or a preset by its Hugging Face id or a folder named like one (each preset's context length is in
:mod:`hicache_sim.hardware.presets`)."""

from __future__ import annotations

from pathlib import Path, PurePath

# preset -> Hugging Face ids, the first one printed by sglang-args.
PRESET_MODELS: dict[str, tuple[str, ...]] = {
    "llama-3.1-8b": (
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B",
    ),
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Meta-Llama-3.1-70B",
        "meta-llama/Llama-3.3-70B-Instruct",
    ),
    "llama-3.1-405b": (
        "meta-llama/Llama-3.1-405B-Instruct",
        "meta-llama/Meta-Llama-3.1-405B-Instruct",
        "meta-llama/Llama-3.1-405B",
    ),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-72B"),
    "qwen3-8b": ("Qwen/Qwen3-8B",),
    "qwen3-14b": ("Qwen/Qwen3-14B",),
    "qwen3-32b": ("Qwen/Qwen3-32B",),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B",),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",),
    "glm-4.5": ("zai-org/GLM-4.5", "THUDM/GLM-4.5"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324"),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"),
}


def _names() -> dict[str, str]:
    out = {}
    for preset, ids in PRESET_MODELS.items():
        out[preset] = preset
        for i in ids:
            out[i.lower()] = preset
            out.setdefault(i.split("/")[-1].lower(), preset)  # a local folder named as the repo
    return out


_BY_NAME = _names()


def preset_for(model_path: str) -> str | None:
    """The preset ``--model-path`` names (a Hugging Face id, a folder of that name, or a preset), or None."""
    p = model_path.rstrip("/")
    return _BY_NAME.get(p.lower()) or _BY_NAME.get(PurePath(p).name.lower())


def hf_id(preset: str) -> str | None:
    """The Hugging Face id sglang-args prints for ``preset`` (None for a model given by dimensions)."""
    entry = PRESET_MODELS.get(preset)
    return entry[0] if entry else None


def local_config(model_path: str) -> str | None:
    """The config.json of ``--model-path`` when it is a local folder holding one (SGLang reads the model
    from it), as an absolute path; None otherwise (a Hugging Face id, or a folder elsewhere)."""
    config = Path(model_path) / "config.json"
    return str(config.resolve()) if config.is_file() else None


def model_path_of(config: str) -> str:
    """The ``--model-path`` a scenario's ``model.config`` stands for: a vendored preset's Hugging Face id
    (``builtin:NAME``), else the folder holding the file."""
    if config.startswith("builtin:"):
        return hf_id(config.removeprefix("builtin:")) or config
    p = Path(config)
    return str(p.parent if p.name == "config.json" else p)
