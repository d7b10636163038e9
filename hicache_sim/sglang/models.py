"""Model presets by the names SGLang is launched with (``--model-path``): Hugging Face ids, or a local
folder named like one, and each model's context length (its config's ``max_position_embeddings``),
which SGLang's default ``--max-running-requests`` depends on."""

from __future__ import annotations

from pathlib import PurePath

# preset -> (Hugging Face ids, first one printed by sglang-args; context length, tokens).
PRESET_MODELS: dict[str, tuple[tuple[str, ...], int]] = {
    "llama-3.1-8b": (
        (
            "meta-llama/Llama-3.1-8B-Instruct",
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
            "meta-llama/Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-8B",
        ),
        131072,
    ),
    "llama-3.1-70b": (
        (
            "meta-llama/Llama-3.1-70B-Instruct",
            "meta-llama/Meta-Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.1-70B",
            "meta-llama/Meta-Llama-3.1-70B",
            "meta-llama/Llama-3.3-70B-Instruct",
        ),
        131072,
    ),
    "llama-3.1-405b": (
        ("meta-llama/Llama-3.1-405B-Instruct", "meta-llama/Meta-Llama-3.1-405B-Instruct", "meta-llama/Llama-3.1-405B"),
        131072,
    ),
    "qwen2.5-7b": (("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"), 32768),
    "qwen2.5-72b": (("Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-72B"), 32768),
    "qwen3-8b": (("Qwen/Qwen3-8B",), 40960),
    "qwen3-14b": (("Qwen/Qwen3-14B",), 40960),
    "qwen3-32b": (("Qwen/Qwen3-32B",), 40960),
    "qwen3-30b-a3b": (("Qwen/Qwen3-30B-A3B",), 40960),
    "qwen3-235b-a22b": (("Qwen/Qwen3-235B-A22B",), 40960),
    "glm-4.5": (("zai-org/GLM-4.5", "THUDM/GLM-4.5"), 131072),
    "deepseek-v3": (("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324"), 163840),
    "deepseek-r1": (("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"), 163840),
}


def _names() -> dict[str, str]:
    out = {}
    for preset, (ids, _) in PRESET_MODELS.items():
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
    return entry[0][0] if entry else None


def context_len(preset: str | None) -> int | None:
    entry = PRESET_MODELS.get(preset or "")
    return entry[1] if entry else None
