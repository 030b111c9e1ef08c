"""The building blocks of the JSON Schemas in ``mq.cli.schemas`` (and
``mq.cli.schemas_mirror``): strict objects, nullable fields, described leaves."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def _t(kind: str | list[str], description: str, **extra: Any) -> Schema:
    return {"type": kind, "description": description, **extra}


def INT(d: str) -> Schema:
    return _t("integer", d)


def STR(d: str, **extra: Any) -> Schema:
    return _t("string", d, **extra)


def BOOL(d: str) -> Schema:
    return _t("boolean", d)


def nullable(schema: Schema, when: str) -> Schema:
    kind = schema.get("type")
    out = dict(schema, description=f"{schema['description']}; null: {when}")
    if kind is not None:
        out["type"] = [kind, "null"] if isinstance(kind, str) else [*kind, "null"]
    else:
        out["oneOf"] = [*schema["oneOf"], {"type": "null"}]
    return out


def obj(description: str, optional: tuple[str, ...] = (), **properties: Schema) -> Schema:
    return {"type": "object", "description": description, "properties": properties,
            "required": [k for k in properties if k not in optional], "additionalProperties": False}


def arr(items: Schema, description: str) -> Schema:
    return {"type": "array", "description": description, "items": items}


def BYTES(d: str) -> Schema:
    return {"description": f"{d}: a string if the bytes are UTF-8, else {{\"base64\": \"...\"}}",
            "oneOf": [{"type": "string"},
                      {"type": "object", "properties": {"base64": {"type": "string"}}, "required": ["base64"],
                       "additionalProperties": False}]}


def NUM(d: str) -> Schema:
    return _t("number", d)
