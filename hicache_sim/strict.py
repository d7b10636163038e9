"""The base of every scenario section (``scenario/schema.py``'s sections and each workload kind's):
strict pydantic models. It lives below both so that neither imports the other for it."""

from __future__ import annotations

from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

#: The config of every scenario section (unknown keys are errors; infinity and NaN are never a size,
#: a rate or a fraction), shared with ``scenario/schema.py``.
STRICT_CONFIG = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _members(annotation: Any) -> list[Any]:
    """The types a field takes: the members of a union (``X | None`` included), else the type itself."""
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        return [m for a in get_args(annotation) for m in _members(a)]
    return [annotation]


def _is_literal(member: Any) -> bool:
    return get_origin(member) is Literal


def admits_bool(annotation: Any) -> bool:
    """Does a field's type take ``true``/``false``? (``bool``, ``Any``, or a union or literal with one.)"""
    return any(
        m is bool or m is Any or (_is_literal(m) and any(isinstance(a, bool) for a in get_args(m)))
        for m in _members(annotation)
    )


def _expected(annotation: Any) -> str:
    """What a field takes, in words, for the message refusing a boolean."""
    members = _members(annotation)
    if int in members and float not in members:
        return "an integer"
    if float in members or int in members:
        return "a number"
    return "a name" if str in members or any(map(_is_literal, members)) else "a value of its type"


class StrictSpec(BaseModel):
    """Base of every scenario section: unknown keys, infinity and NaN are errors, and so is a boolean
    where a number or a name is expected (pydantic would read ``page_size: true`` as 1)."""

    model_config = STRICT_CONFIG

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(v, bool) and not admits_bool(annotation):
            raise ValueError(f"expected {_expected(annotation)}, got {str(v).lower()}")
        return v
