"""Chat messages to prompt tokens, one fixed template (ChatML, as Qwen's models use):

    <|im_start|>{role}\\n{content}<|im_end|>\\n      for each message, then
    <|im_start|>assistant\\n                         the generation prompt.

Each piece (a message's header, its content, its end marker, the generation prompt) is tokenised on
its own and the token lists are concatenated, so no BPE merge crosses a message boundary: a turn that
resends the conversation so far starts with exactly the previous turn's tokens, and the two share
every whole block of them. A real server renders its own model's template (other markers, a few
tokens more or less per message); pass SGLang's request log (``--format sglang``) to use the server's
own token ids instead.
"""

from __future__ import annotations

from .tokenize import Tokenizer

MESSAGE_HEADER = "<|im_start|>{role}\n"
MESSAGE_END = "<|im_end|>\n"
GENERATION_PROMPT = MESSAGE_HEADER.format(role="assistant")


class ChatFormatError(ValueError):
    """A message list this template cannot render (said in one clause, for a line's error)."""


def message_text(content, index: int) -> str:
    """A message's text: a string, or OpenAI content parts of type ``text`` joined in order."""
    if content is None:  # an assistant turn that only called tools
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatFormatError(f"messages[{index}].content: only text parts are modelled, got {kind!r}")
            parts.append(part["text"])
        return "".join(parts)
    raise ChatFormatError(f"messages[{index}].content must be a string or a list of text parts")


def render_chat(messages, tokenizer: Tokenizer) -> list[int]:
    """Prompt tokens of an OpenAI ``messages`` list under the template above."""
    if not isinstance(messages, list) or not messages:
        raise ChatFormatError("'messages' must be a non-empty list of {role, content} objects")
    tokens: list[int] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ChatFormatError(f"messages[{i}] must be an object with a string 'role'")
        tokens += tokenizer.encode(MESSAGE_HEADER.format(role=m["role"]))
        tokens += tokenizer.encode(message_text(m.get("content", ""), i))
        tokens += tokenizer.encode(MESSAGE_END)
    tokens += tokenizer.encode(GENERATION_PROMPT)
    return tokens
