"""MkDocs hooks: the configuration reference is generated from the config's JSON
Schema at build time (``wal_sink.config.config_schema``), so every key, type,
default and docstring in the docs is the code's own, never copied by hand.

A page asks for it with a line holding only ``<!-- config-reference -->``.
"""

from __future__ import annotations

import json
from typing import Any

from wal_sink.config import config_schema

MARKER = "<!-- config-reference -->"
# The config's Seconds type: a number of seconds, or text such as "10 seconds" (the
# page says so once, above the tables).
DURATION = "duration"
UNSET = "Sentinel.UNSET"


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    reference = config_reference(config_schema())
    # A block of its own, so the page's CSS can keep key names from wrapping.
    block = f'<div class="config-reference" markdown="1">\n\n{reference}\n\n</div>'
    return markdown.replace(MARKER, block)


def on_page_content(html: str, **_: Any) -> str:
    """mkdocs-click 0.9 prints click 8.3's "no default" sentinel as text in the CLI
    reference's default column; the reference shows a dash there instead."""
    return html.replace(f"<code>{UNSET}</code>", "—")


def config_reference(schema: dict[str, Any]) -> str:
    """One table per config section, in the order the schema declares them."""
    defs = schema["$defs"]
    parts = []
    for name, prop in schema["properties"].items():
        section = target_schema(prop, defs)
        required = name in schema.get("required", [])
        parts.append(_section(f"[{name}]", section, defs, required, prop))
    return "\n\n".join(parts)


def _section(
    title: str,
    section: dict[str, Any],
    defs: dict[str, Any],
    required: bool,
    prop: dict[str, Any],
) -> str:
    lines = [
        f"### `{title}`",
        "",
        _clean(prop.get("description", "")),
        "",
        "Required section." if required else "Optional section.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    nested = []
    for key, field in section.get("properties", {}).items():
        target = target_schema(field, defs)
        values = target.get("additionalProperties")
        if target.get("type") == "object" and "properties" in target:
            sub = f"{title[:-1]}.{key}]"
            nested.append(
                _section(sub, target, defs, key in section.get("required", []), field)
            )
            kind = f"table (see `{sub}`)"
        elif isinstance(values, dict) and "$ref" in values:  # a section per name
            sub = f"{title[:-1]}.{key}.NAME]"
            nested.append(
                _section(sub, target_schema(values, defs), defs, False, field)
            )
            kind = f"tables by name (see `{sub}`)"
        else:
            kind = _type(field, defs)
        default = (
            "required"
            if key in section.get("required", [])
            else _default(field.get("default"), seconds=kind == DURATION)
        )
        lines.append(
            f"| `{key}` | {kind} | {default} | {_clean(field.get('description', ''))} |"
        )
    return "\n".join([*lines, "", *nested])


def target_schema(field: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The schema a field stands for, through ``$ref`` and ``X | None``."""
    if "$ref" in field:
        return defs[field["$ref"].rsplit("/", 1)[1]]
    for option in field.get("anyOf", []):
        if option.get("type") != "null":
            return target_schema(option, defs)
    return field


def _type(field: dict[str, Any], defs: dict[str, Any]) -> str:
    if "anyOf" in field:
        kinds = [_type(o, defs) for o in field["anyOf"] if o.get("type") != "null"]
        if set(kinds) == {"number", "string"}:  # the config's Seconds type
            return DURATION
        return " or ".join(dict.fromkeys(kinds))
    if "enum" in field:
        return " \\| ".join(f'`"{v}"`' for v in field["enum"])
    if "const" in field:
        return f'`"{field["const"]}"`'
    kind = field.get("type", "any")
    if kind == "array":
        return f"list of {_type(field.get('items', {}), defs)}"
    if kind == "object":
        values = field.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"table of {_type(values, defs)}"
        return "table"
    return {"number": "number", "integer": "integer", "string": "string"}.get(
        kind, kind
    )


def _default(value: Any, *, seconds: bool = False) -> str:
    if value is None:
        return "—"
    if value in ({}, []):
        return "empty"
    if seconds and isinstance(value, (int, float)):
        return f"`{value:g}` s"
    return f"`{json.dumps(value)}`"


def _clean(text: str) -> str:
    """A docstring as one table cell: reST literals as Markdown, no pipes, one line."""
    return " ".join(text.replace("``", "`").replace("|", "\\|").split())
