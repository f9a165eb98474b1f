"""Render the subset of Terraform's template language that our .tftpl files use, without Terraform.

Supported: ``${expr}``, ``%{ for k, v in expr }`` / ``%{ for x in expr }`` ... ``%{ endfor }``,
``%{ if expr }`` ... ``%{ else }`` ... ``%{ endif }``, the ``~`` strip markers, and the ``$${`` /
``%%{`` escapes. Expressions are attribute access on the variables, string literals, ``==``,
``!=``, ``!`` and ``join()``; anything else raises, so a template that outgrows this renderer
fails its test instead of rendering wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_OPEN = re.compile(r"\$\$\{|%%\{|\$\{|%\{")
_EXPR = re.compile(
    r'\s*(?:"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*'
    r"|==|!=|!|,|\(|\)|[0-9]+)"
)


class TemplateError(ValueError):
    """The template uses syntax this renderer does not know."""


class _Attrs(dict[str, Any]):
    def __getattr__(self, name: str) -> Any:
        try:
            return _wrap(self[name])
        except KeyError:
            raise TemplateError(f"unknown attribute {name!r}") from None


def _wrap(value: Any) -> Any:
    return _Attrs(value) if isinstance(value, Mapping) else value


def _evaluate(expression: str, scope: Mapping[str, Any]) -> Any:
    position, tokens = 0, []
    while position < len(expression.rstrip()):
        match = _EXPR.match(expression, position)
        if not match:
            raise TemplateError(f"cannot evaluate {expression!r}")
        tokens.append(match.group().strip())
        position = match.end()
    python = " ".join("not" if token == "!" else token for token in tokens)
    names = {key: _wrap(value) for key, value in scope.items()}
    names.update(true=True, false=False)
    names["join"] = lambda separator, items: separator.join(str(item) for item in items)
    try:
        return eval(python, {"__builtins__": {}}, names)
    except (NameError, SyntaxError, TypeError) as error:
        raise TemplateError(f"cannot evaluate {expression!r}: {error}") from None


def _scan(template: str) -> list[tuple[str, str]]:
    """Split into ("text", s), ("interp", expr) and ("directive", body) with strips applied."""
    parts: list[tuple[str, str]] = []
    position, strip_next = 0, False
    while True:
        match = _OPEN.search(template, position)
        text = template[position : match.start() if match else len(template)]
        if strip_next:
            # HCL strips within the adjacent line only: up to and including its newline.
            text = re.sub(r"^[^\S\n]*\n?", "", text)
        if not match:
            parts.append(("text", text))
            return parts
        opener = match.group()
        if opener in ("$${", "%%{"):
            parts.append(("text", text + opener[1:]))
            position, strip_next = match.end(), False
            continue
        end = template.index("}", match.end())
        body = template[match.end() : end]
        if body.startswith("~"):
            text, body = re.sub(r"[^\S\n]*\n?$", "", text), body[1:]
        strip_next = body.endswith("~")
        body = body.rstrip("~").strip()
        parts.append(("text", text))
        parts.append(("interp" if opener == "${" else "directive", body))
        position = end + 1


def _render(parts: list[tuple[str, str]], scope: Mapping[str, Any]) -> str:
    out: list[str] = []
    index = 0
    while index < len(parts):
        kind, body = parts[index]
        if kind == "text":
            out.append(body)
        elif kind == "interp":
            value = _evaluate(body, scope)
            out.append(str(value).lower() if isinstance(value, bool) else str(value))
        elif (loop := re.fullmatch(r"for\s+(\w+)(?:\s*,\s*(\w+))?\s+in\s+(.+)", body)) is not None:
            inner, index = _block(parts, index, "for", "endfor")
            items = _evaluate(loop.group(3), scope)
            pairs = items.items() if isinstance(items, Mapping) else enumerate(items)
            if isinstance(items, Mapping):
                pairs = sorted(pairs)  # Terraform iterates maps in key order.
            for key, value in pairs:
                names = (
                    {loop.group(1): key, loop.group(2): value}
                    if loop.group(2)
                    else {loop.group(1): value}
                )
                out.append(_render(inner, {**scope, **names}))
        elif body.startswith("if "):
            inner, index = _block(parts, index, "if", "endif")
            depth, split = 0, len(inner)
            for position, (inner_kind, inner_body) in enumerate(inner):
                if inner_kind != "directive":
                    continue
                word = inner_body.split()[0]
                depth += word in ("if", "for")
                depth -= word in ("endif", "endfor")
                if depth == 0 and inner_body == "else":
                    split = position
                    break
            chosen = inner[:split] if _evaluate(body[3:], scope) else inner[split + 1 :]
            out.append(_render(chosen, scope))
        else:
            raise TemplateError(f"unknown directive %{{{body}}}")
        index += 1
    return "".join(out)


def _block(parts: list[tuple[str, str]], start: int, opener: str, closer: str) -> tuple[Any, int]:
    depth = 0
    for index in range(start, len(parts)):
        kind, body = parts[index]
        if kind != "directive":
            continue
        word = body.split()[0]
        depth += word == opener
        depth -= word == closer
        if depth == 0:
            return parts[start + 1 : index], index
    raise TemplateError(f"%{{{opener}}} without %{{{closer}}}")


def render(template: str, variables: Mapping[str, Any]) -> str:
    """Render ``template`` as Terraform's ``templatefile`` would for these variables."""
    return _render(_scan(template), variables)
