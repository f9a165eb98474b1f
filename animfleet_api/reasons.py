"""A refused request's reason in plain words, from a pydantic error: "must be at most 64", never
pydantic's own wording ("Input should be less than or equal to 64", "Value error, ...")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from animfleet_api.fields import shown

# Each error type pydantic reports for a request body, as a reason; ``{name}`` from its context.
_REASONS = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this request",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "multiple_of": "must be a multiple of {multiple_of}",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    "too_long": "must have at most {max_length} items",
    "too_short": "must have at least {min_length} items",
    "string_pattern_mismatch": "must match {pattern}",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
    "url_parsing": "must be a URL",
    "url_scheme": "must be an http(s) URL",
}
_VALUE_ERROR = "Value error, "  # what pydantic puts before our own validators' messages


def reason(error: Mapping[str, Any]) -> str:
    """Why the value at ``error["loc"]`` was refused, in the API's words."""
    kind, context = str(error.get("type", "")), error.get("ctx") or {}
    template = _REASONS.get(kind)
    if template is not None:
        try:
            return template.format(**context)
        except (KeyError, IndexError):
            pass
    message = str(error.get("msg", "is invalid"))
    if message.startswith(_VALUE_ERROR):  # our validators' messages are already ours
        return message.removeprefix(_VALUE_ERROR)
    return message[:1].lower() + message[1:]


def refusal(error: Mapping[str, Any]) -> str:
    """The reason and, unless the value is missing, what was sent (:func:`shown`)."""
    if error.get("type") == "missing":
        return reason(error)
    return f"{reason(error)} (got {shown(error.get('input'))})"
