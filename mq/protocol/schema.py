"""Per-class encoders and decoders generated from the message dataclasses' type hints.

``encoder_for(cls)`` and ``decoder_for(cls)`` compile, once per class, a function whose
source is generated from the type hints (as ``dataclasses`` does for ``__init__``),
so a message is encoded or decoded by straight-line code: one dict lookup and one
inline type check per field, no walk over ``typing`` objects. Produce and Fetch are
on the hot path; this keeps them at a few microseconds. ``source_of(cls)`` shows the
generated code.

Supported hints: ``int`` (64-bit signed), ``bool``, ``str``, ``bytes``, ``Records``,
``X | None``, ``list[X]``, ``dict[str, str]`` and nested dataclasses. Decoding refuses
wrong types (``bool`` is not an ``int``, ``bytes`` is not a ``str``), missing required
fields and unknown fields with ``ProtocolError(INVALID_REQUEST)``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from mq.core.errors import ErrorCode
from mq.protocol.errors import ProtocolError
from mq.protocol.messages import Records

EncodeFn = Callable[[Any, "Encoder"], Any]
DecodeFn = Callable[[Any, memoryview], Any]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_encoders: dict[type, EncodeFn] = {}
_decoders: dict[type, DecodeFn] = {}
_sources: dict[tuple[str, type], str] = {}
_MISSING = object()
_SCALAR_TYPES = (int, bool, str, bytes)


class Encoder:
    """Collects the ``Records`` fields of one message into the frame's tail."""

    __slots__ = ("tail_parts", "tail_size")

    def __init__(self) -> None:
        self.tail_parts: list[bytes | memoryview] = []
        self.tail_size = 0

    def add_records(self, records: bytes | bytearray | memoryview) -> list[int]:
        size = records.nbytes if type(records) is memoryview else len(records)
        offset = self.tail_size
        self.tail_parts.append(records)
        self.tail_size = offset + size
        return [offset, size]


def invalid(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_REQUEST, message)


def _bad_type(where: str, expected: str, value: object) -> ProtocolError:
    return invalid(f"{where}: expected {expected}, got {type(value).__name__}")


def type_name(hint: Any) -> str:
    """The hint as written in the docs: ``list[int]``, ``str | None``, ``Records``."""
    if hint == Records:
        return "Records"
    if hint is type(None):
        return "None"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"


def optional_arg(hint: Any) -> Any | None:
    """``X`` for ``X | None``, else ``None``."""
    if hint != Records and typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if len(args) == 2 and type(None) in args:
            return args[0] if args[1] is type(None) else args[1]
    return None


def field_hints(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    """The dataclass fields of ``cls`` with their resolved type hints, in order."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


# ---------------------------------------------------------------- value decoders


def _dec_records(v: Any, tail: memoryview, where: str) -> memoryview:
    if type(v) is not list or len(v) != 2 or type(v[0]) is not int or type(v[1]) is not int:
        raise invalid(f"{where}: a Records field must be [tail_offset, length]")
    offset, length = v
    if offset < 0 or length < 0 or offset + length > len(tail):
        raise invalid(f"{where}: range [{offset}, {length}] outside the {len(tail)}-byte tail")
    return tail[offset : offset + length]


def _raise_records_error(v: Any, tail: memoryview, where: str) -> None:
    _dec_records(v, tail, where)  # raises: the generated code only calls it on a bad range
    raise invalid(f"{where}: bad records range")


def _check_int_list(v: Any, where: str) -> list[int]:
    if type(v) is not list:
        raise _bad_type(where, "list[int]", v)
    for item in v:
        if type(item) is not int or not INT64_MIN <= item <= INT64_MAX:
            raise _bad_type(where, "list[int]", item)
    return v


def _check_str_list(v: Any, where: str) -> list[str]:
    if type(v) is not list:
        raise _bad_type(where, "list[str]", v)
    for item in v:
        if type(item) is not str:
            raise _bad_type(where, "list[str]", item)
    return v


def _check_str_dict(v: Any, where: str) -> dict[str, str]:
    if type(v) is not dict:
        raise _bad_type(where, "dict[str, str]", v)
    for key, value in v.items():
        if type(key) is not str or type(value) is not str:
            raise invalid(f"{where}: expected dict[str, str]")
    return v


def _value_decoder(hint: Any, where: str) -> Callable[[Any, memoryview], Any]:
    """A closure decoding one value of ``hint`` (for hints not inlined by the generator)."""
    if hint == Records:
        return lambda v, tail: _dec_records(v, tail, where)
    if dataclasses.is_dataclass(hint):
        return decoder_for(hint)  # type: ignore[arg-type]
    if hint in _SCALAR_TYPES:

        def dec_scalar(v: Any, tail: memoryview) -> Any:
            if type(v) is not hint or (hint is int and not INT64_MIN <= v <= INT64_MAX):
                raise _bad_type(where, hint.__name__, v)
            return v
        return dec_scalar
    inner = optional_arg(hint)
    if inner is not None:
        inner_dec = _value_decoder(inner, where)
        return lambda v, tail: None if v is None else inner_dec(v, tail)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args[0] is int:
        return lambda v, tail: _check_int_list(v, where)
    if origin is list and args[0] is str:
        return lambda v, tail: _check_str_list(v, where)
    if origin is list:
        item_dec = _value_decoder(args[0], where)

        def dec_list(v: Any, tail: memoryview) -> list[Any]:
            if type(v) is not list:
                raise _bad_type(where, type_name(hint), v)
            return [item_dec(item, tail) for item in v]
        return dec_list
    if origin is dict and args == (str, str):
        return lambda v, tail: _check_str_dict(v, where)
    raise TypeError(f"no wire encoding for type hint {hint!r} ({where})")


def _inline_check(hint: Any, var: str) -> str | None:
    """A Python expression that is true when ``var`` does NOT match the scalar ``hint``."""
    if hint is int:
        return f"type({var}) is not int or not INT64_MIN <= {var} <= INT64_MAX"
    if hint in (bool, str, bytes):
        return f"type({var}) is not {hint.__name__}"
    return None


# ---------------------------------------------------------------- code generation


def _compile(kind: str, cls: type, lines: list[str], namespace: dict[str, Any]) -> Any:
    source = "\n".join(lines) + "\n"
    _sources[(kind, cls)] = source
    code = compile(source, f"<mq.protocol.schema {kind} {cls.__name__}>", "exec")
    exec(code, namespace)  # noqa: S102 - the source is generated from our own type hints
    return namespace[f"{kind}_{cls.__name__}"]


def decoder_for(cls: type) -> DecodeFn:
    """``fn(body, tail) -> instance`` for the dataclass ``cls`` (generated once, cached)."""
    cached = _decoders.get(cls)
    if cached is not None:
        return cached
    _decoders[cls] = lambda body, tail: _decoders[cls](body, tail)  # for recursive hints
    name = cls.__name__
    ns: dict[str, Any] = {
        "cls": cls, "MISSING": _MISSING, "INT64_MIN": INT64_MIN, "INT64_MAX": INT64_MAX,
        "invalid": invalid, "bad_type": _bad_type, "new": object.__new__,
        "raise_records_error": _raise_records_error,
    }
    lines = [f"def decode_{name}(body, tail):",
             "    if type(body) is not dict:",
             f"        raise bad_type({name!r}, 'a map', body)",
             "    found = 0"]
    fields = field_hints(cls)
    for i, (f, hint) in enumerate(fields):
        where = f"{name}.{f.name}"
        lines.append(f"    v = body.get({f.name!r}, MISSING)")
        lines.append("    if v is MISSING:")
        if f.default is not dataclasses.MISSING:
            ns[f"default_{i}"] = f.default
            lines.append(f"        v = default_{i}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"factory_{i}"] = f.default_factory
            lines.append(f"        v = factory_{i}()")
        else:
            lines.append(f"        raise invalid({where + ' is missing'!r})")
        lines.append("    else:")
        lines.append("        found += 1")
        inner = optional_arg(hint)
        check = _inline_check(inner if inner is not None else hint, "v")
        if check is not None:
            guard = f"v is not None and ({check})" if inner is not None else check
            lines.append(f"        if {guard}:")
            lines.append(f"            raise bad_type({where!r}, {type_name(hint)!r}, v)")
        elif hint == Records:  # inlined: Produce and Fetch carry one per partition
            lines.append("        if (type(v) is not list or len(v) != 2 or type(v[0]) is not int")
            lines.append("                or type(v[1]) is not int or v[0] < 0 or v[1] < 0")
            lines.append("                or v[0] + v[1] > len(tail)):")
            lines.append(f"            raise_records_error(v, tail, {where!r})")
            lines.append("        v = tail[v[0] : v[0] + v[1]]")
        elif typing.get_origin(hint) is list and dataclasses.is_dataclass(typing.get_args(hint)[0]):
            ns[f"dec_{i}"] = decoder_for(typing.get_args(hint)[0])
            lines.append("        if type(v) is not list:")
            lines.append(f"            raise bad_type({where!r}, {type_name(hint)!r}, v)")
            lines.append(f"        v = [dec_{i}(item, tail) for item in v]")
        else:
            ns[f"dec_{i}"] = _value_decoder(hint, where)
            lines.append(f"        v = dec_{i}(v, tail)")
        lines.append(f"    a{i} = v")
    lines.append("    if found != len(body):")
    lines.append(f"        raise invalid({name!r} + ' has unknown fields ' + "
                 f"repr(sorted(str(k) for k in body if k not in {[f.name for f, _ in fields]!r})))")
    if hasattr(cls, "__slots__") and not hasattr(cls, "__post_init__"):
        # Frozen dataclasses set each field through object.__setattr__; the slot
        # descriptors do the same assignment at half the cost.
        lines.append("    obj = new(cls)")
        for i, (f, _) in enumerate(fields):
            ns[f"set_{i}"] = getattr(cls, f.name).__set__
            lines.append(f"    set_{i}(obj, a{i})")
        lines.append("    return obj")
    else:
        lines.append(f"    return cls({', '.join(f'a{i}' for i in range(len(fields)))})")
    decode = _compile("decode", cls, lines, ns)
    _decoders[cls] = decode
    return decode


def _value_encoder(hint: Any) -> EncodeFn | None:
    """A closure encoding one value of ``hint``; ``None`` when msgpack takes it as is."""
    if hint == Records:
        return lambda v, encoder: encoder.add_records(v)
    if dataclasses.is_dataclass(hint):
        return encoder_for(hint)  # type: ignore[arg-type]
    inner = optional_arg(hint)
    if inner is not None:
        inner_enc = _value_encoder(inner)
        if inner_enc is None:
            return None
        return lambda v, encoder: None if v is None else inner_enc(v, encoder)
    if typing.get_origin(hint) is list:
        item_enc = _value_encoder(typing.get_args(hint)[0])
        if item_enc is None:
            return None
        return lambda v, encoder: [item_enc(item, encoder) for item in v]
    return None


def encoder_for(cls: type) -> EncodeFn:
    """``fn(instance, encoder) -> dict`` for the dataclass ``cls`` (generated, cached)."""
    cached = _encoders.get(cls)
    if cached is not None:
        return cached
    _encoders[cls] = lambda obj, encoder: _encoders[cls](obj, encoder)  # recursive hints
    ns: dict[str, Any] = {}
    items = []
    for i, (f, hint) in enumerate(field_hints(cls)):
        _value_decoder(hint, f"{cls.__name__}.{f.name}")  # refuse unsupported hints early
        enc = _value_encoder(hint)
        if enc is None:
            items.append(f"{f.name!r}: obj.{f.name}")
        else:
            ns[f"enc_{i}"] = enc
            items.append(f"{f.name!r}: enc_{i}(obj.{f.name}, encoder)")
    lines = [f"def encode_{cls.__name__}(obj, encoder):",
             f"    return {{{', '.join(items)}}}"]
    encode = _compile("encode", cls, lines, ns)
    _encoders[cls] = encode
    return encode


def fast_constructor(cls: type) -> Callable[..., Any]:
    """A positional constructor for a frozen slots dataclass that sets the slots
    directly: half the cost of the generated ``__init__`` (which goes through
    ``object.__setattr__``), for objects made millions of times (records)."""
    if not hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        return cls
    names = [f.name for f in dataclasses.fields(cls)]
    ns: dict[str, Any] = {"cls": cls, "new": object.__new__}
    lines = [f"def construct_{cls.__name__}({', '.join(names)}):", "    obj = new(cls)"]
    for i, name in enumerate(names):
        ns[f"set_{i}"] = getattr(cls, name).__set__
        lines.append(f"    set_{i}(obj, {name})")
    lines.append("    return obj")
    return _compile("construct", cls, lines, ns)


def source_of(kind: str, cls: type) -> str:
    """The generated source of ``encode`` or ``decode`` for ``cls`` (for reading)."""
    (encoder_for if kind == "encode" else decoder_for)(cls)
    return _sources[(kind, cls)]
