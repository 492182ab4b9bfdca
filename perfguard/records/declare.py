"""Stored records declared once: a frozen dataclass whose fields say how they are stored.

A record class derives from :class:`Record` and describes each field's JSON form in
its metadata (:func:`spec`): the key when it differs from the field's name, when the
key is left out (``omit``: never, when None, when equal to the default), bounds on
numbers (``minimum``/``maximum``), the words a string may hold (``values``), a string's
``pattern`` (``read_pattern``: a reader's looser one), ``min_length``, a dict's
``key_pattern``, a ``description`` for the JSON Schema, ``inline`` for a record whose
keys sit in its parent's object, and ``codec`` (:class:`Codec`) for a value whose JSON
form is written by hand (an open object, rows of a table): its schema is checked on
read before its decoder runs. From that one declaration come

* :func:`encode`: the JSON dict (key order = field order, or ``KEY_ORDER``, so the
  bytes of a file are those a reviewer diffs);
* :func:`decode`: the record read back, every value checked as it is read (type,
  bounds, words), a ResultsError naming the file, the JSON path of the bad value,
  what was expected and the fix otherwise; missing keys of defaulted fields take the
  default and unknown keys are ignored (an older or newer perfguard of the same
  schema version);
* :func:`json_schema`: the JSON Schema (draft 2020-12) of the record, its nested
  records under ``$defs`` by their ``SCHEMA_NAME``.

Values are kept as read: a float field that a file holds as ``3`` stays the int ``3``,
so a record read from a file encodes back to the same bytes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Literal, TypeVar

from perfguard.core.errors import ResultsError

__all__ = [
    "TAMPERED_FIX",
    "FieldSpec",
    "Record",
    "Shape",
    "StoredField",
    "decode",
    "describe_value",
    "encode",
    "json_schema",
    "schema_defs",
    "schema_problem",
    "spec",
    "stored_fields",
]

#: The fix for a stored document holding a value perfguard never writes.
TAMPERED_FIX = (
    "the file was not written by perfguard or was edited: restore it from git, or "
    "re-create it with `pytest --perfguard`"
)

Omit = Literal["never", "none", "default"]

_META = "perfguard.record"

R = TypeVar("R", bound="Record")


@dataclass(frozen=True)
class Codec:
    """A hand-written JSON form for a value whose shape is not a plain record (an open
    object, rows of a table): ``encode`` it, ``decode(value, source, path)`` it (raising
    ResultsError, or KeyError/TypeError/ValueError/AttributeError/IndexError, which
    become a ResultsError at its place), and its JSON ``schema`` (null included when
    the field may hold None)."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any, str, str], Any]
    schema: Mapping[str, Any]
    expected: str


@dataclass(frozen=True)
class FieldSpec:
    """How one field is stored (see the module docstring)."""

    key: str | None = None
    omit: Omit = "never"
    minimum: float | None = None
    maximum: float | None = None
    values: tuple[Any, ...] | None = None
    pattern: str | None = None
    key_pattern: str | None = None
    description: str | None = None
    inline: bool = False
    min_length: int | None = None
    read_pattern: str | None = None
    codec: Codec | None = None


def spec(
    *,
    key: str | None = None,
    omit: Omit = "never",
    minimum: float | None = None,
    maximum: float | None = None,
    values: tuple[Any, ...] | None = None,
    pattern: str | None = None,
    key_pattern: str | None = None,
    description: str | None = None,
    inline: bool = False,
    min_length: int | None = None,
    read_pattern: str | None = None,
    codec: Codec | None = None,
) -> dict[str, Any]:
    """A field's metadata (``field(metadata=spec(...))``). Bounds, ``values`` and
    ``pattern`` apply to the innermost scalar: the items of a tuple, the values of a
    dict."""
    return {  # see the module docstring; read_pattern: a reader's looser pattern
        _META: FieldSpec(
            key,
            omit,
            minimum,
            maximum,
            values,
            pattern,
            key_pattern,
            description,
            inline,
            min_length,
            read_pattern,
            codec,
        )
    }


class Record:
    """Base of a stored record: ``to_dict``/``from_dict`` from its declaration.

    ``SCHEMA_NAME`` names its entry under the schema's ``$defs``; ``SCHEMA_DESCRIPTION``
    (optional) describes it there.
    """

    SCHEMA_NAME: ClassVar[str]
    SCHEMA_DESCRIPTION: ClassVar[str | None] = None
    #: The JSON keys' order where it is not the fields' (field names; all of them).
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = None

    def to_dict(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_dict(
        cls: type[R],
        data: Any,
        *,
        source: str = "<results>",
        path: str = "$",
        what: str = "stored record",
        fix: str = TAMPERED_FIX,
    ) -> R:
        return decode(cls, data, source=source, path=path, what=what, fix=fix)


# --------------------------------------------------------------------------- types

_NONE = type(None)


@dataclass(frozen=True)
class Shape:
    """A field's type, taken apart once: ``kind`` is one of scalar (``base``: int, float,
    str, bool), enum, record, tuple, dict, any, codec (a field with a hand-written
    codec); ``item`` the shape of a container's items; ``nullable`` whether None is
    allowed."""

    kind: str
    nullable: bool = False
    base: Any = None
    item: Shape | None = None


def _shape(hint: Any) -> Shape:
    nullable = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not _NONE]
        nullable = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"unsupported union in a record: {hint!r}")
        inner = _shape(args[0])
        return dataclasses.replace(inner, nullable=nullable or inner.nullable)
    if hint is Any:
        return Shape("any", nullable=True)
    if origin is tuple:
        parts = typing.get_args(hint)
        if len(parts) != 2 or parts[1] is not Ellipsis:
            raise TypeError(f"only tuple[T, ...] is supported in a record: {hint!r}")
        return Shape("tuple", item=_shape(parts[0]))
    if origin in (dict, Mapping):  # a Mapping field is read back as a dict
        key, value = typing.get_args(hint)
        if key is not str:
            raise TypeError(f"only dict[str, T] is supported in a record: {hint!r}")
        return Shape("dict", item=_shape(value))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return Shape("enum", base=hint)
    if isinstance(hint, type) and issubclass(hint, Record):
        return Shape("record", base=hint)
    if hint in (int, float, str, bool):
        return Shape("scalar", base=hint)
    raise TypeError(f"unsupported type in a record: {hint!r}")


def _codec_shape(hint: Any) -> Shape:
    nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and _NONE in (
        typing.get_args(hint)
    )
    return Shape("codec", nullable=nullable)


@dataclass(frozen=True)
class StoredField:
    """One field of a record: its JSON key, shape, spec and default."""

    name: str
    key: str
    shape: Shape
    spec: FieldSpec
    has_default: bool
    default: Any  # a value, or a zero-argument factory when ``factory``
    factory: bool

    def default_value(self) -> Any:
        return self.default() if self.factory else self.default


_FIELDS: dict[type[Record], tuple[StoredField, ...]] = {}


def stored_fields(cls: type[Record]) -> tuple[StoredField, ...]:
    """How each field of ``cls`` is stored, in order (read once per class)."""
    known = _FIELDS.get(cls)
    if known is None:
        known = _FIELDS[cls] = _read_fields(cls)
    return known


def _read_fields(cls: type[Record]) -> tuple[StoredField, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    declared = dataclasses.fields(cls)  # type: ignore[arg-type]
    if cls.KEY_ORDER is not None:
        by_name = {f.name: f for f in declared}
        if sorted(by_name) != sorted(cls.KEY_ORDER):
            raise TypeError(f"{cls.__name__}.KEY_ORDER must name every field once")
        declared = tuple(by_name[name] for name in cls.KEY_ORDER)
    for f in declared:
        meta = f.metadata.get(_META, FieldSpec())
        factory = f.default_factory is not dataclasses.MISSING
        has_default = factory or f.default is not dataclasses.MISSING
        default = f.default_factory if factory else f.default
        shape = _codec_shape(hints[f.name]) if meta.codec is not None else _shape(hints[f.name])
        if meta.inline and shape.kind != "record":
            raise TypeError(f"{cls.__name__}.{f.name}: only a record can be inline")
        out.append(
            StoredField(f.name, meta.key or f.name, shape, meta, has_default, default, factory)
        )
    return tuple(out)


# --------------------------------------------------------------------------- encode


def _encode_value(value: Any, shape: Shape, meta: FieldSpec) -> Any:
    if value is None:
        return None
    if shape.kind == "codec":
        assert meta.codec is not None
        return meta.codec.encode(value)
    if shape.kind == "record":
        return encode(value)
    if shape.kind == "enum":
        return value.value
    if shape.kind == "tuple":
        assert shape.item is not None
        return [_encode_value(v, shape.item, meta) for v in value]
    if shape.kind == "dict":
        assert shape.item is not None
        return {k: _encode_value(v, shape.item, meta) for k, v in value.items()}
    return value


def encode(record: Record) -> dict[str, Any]:
    """The JSON object of ``record``, its keys in the order of its fields."""
    out: dict[str, Any] = {}
    for f in stored_fields(type(record)):
        value = getattr(record, f.name)
        if f.spec.inline:
            out.update(encode(value))
            continue
        if f.spec.omit == "none" and value is None:
            continue
        if f.spec.omit == "default" and f.has_default and value == f.default_value():
            continue
        out[f.key] = _encode_value(value, f.shape, f.spec)
    return out


# --------------------------------------------------------------------------- decode


def describe_value(value: Any) -> str:
    """A short rendering of a stored value for an error message."""
    if isinstance(value, (dict, list, tuple)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else ""
    return (text[:60] + "...") if len(text) > 60 else text


@dataclass(frozen=True)
class _Reading:
    source: str
    what: str
    fix: str

    def refuse(self, place: str, value: Any, expected: str) -> ResultsError:
        return ResultsError(
            f"{self.source}: {self.what} holds {describe_value(value)} at {place}",
            expected=expected,
            fix=self.fix,
        )


_SCALAR_NAMES: Mapping[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
}


def _scalar_ok(value: Any, base: Any) -> bool:
    if base is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if base is float:
        return isinstance(value, (int, float))
    return isinstance(value, base)


def _decode_value(value: Any, shape: Shape, meta: FieldSpec, at: str, reading: _Reading) -> Any:
    if value is None:
        if shape.nullable or (meta.values is not None and None in meta.values):
            return None
        raise reading.refuse(at, value, _expected(shape, meta))
    if shape.kind == "any":
        return value
    if shape.kind == "codec":
        assert meta.codec is not None
        found = schema_problem(value, meta.codec.schema, meta.codec.schema, at)
        if found is not None:
            place, expected, bad = found
            raise reading.refuse(place, bad, expected)
        try:
            return meta.codec.decode(value, reading.source, at)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise reading.refuse(at, value, meta.codec.expected) from exc
    if shape.kind == "record":
        if not isinstance(value, dict):
            raise reading.refuse(at, value, _expected(shape, meta))
        return _decode_record(shape.base, value, at, reading)
    if shape.kind == "enum":
        words = [m.value for m in shape.base]
        if not isinstance(value, str) or value not in words:
            raise reading.refuse(at, value, _expected(shape, meta))
        return shape.base(value)
    if shape.kind == "tuple":
        assert shape.item is not None
        if not isinstance(value, (list, tuple)):  # a tuple: samples decoded by the reader
            raise reading.refuse(at, value, _expected(shape, meta))
        item = shape.item
        if (
            item.kind == "scalar"
            and item.base is int
            and meta.minimum == 0
            and meta.maximum is None
            and all(type(v) is int and v >= 0 for v in value)
        ):
            return tuple(value)  # raw samples: up to millions of them, checked in one pass
        return tuple(
            _decode_value(v, item, meta, f"{at}[{i}]", reading) for i, v in enumerate(value)
        )
    if shape.kind == "dict":
        assert shape.item is not None
        if not isinstance(value, dict):
            raise reading.refuse(at, value, _expected(shape, meta))
        out = {}
        for k, v in value.items():
            if meta.key_pattern is not None and not re.search(meta.key_pattern, k):
                raise reading.refuse(f"{at}.{k}", k, f"keys matching {meta.key_pattern}")
            out[k] = _decode_value(v, shape.item, meta, f"{at}.{k}", reading)
        return out
    if not _scalar_ok(value, shape.base):
        raise reading.refuse(at, value, _expected(shape, meta))
    if meta.values is not None and value not in meta.values:
        raise reading.refuse(at, value, _expected(shape, meta))
    pattern = meta.read_pattern or meta.pattern
    if isinstance(value, str) and pattern is not None and not re.search(pattern, value):
        raise reading.refuse(at, value, f"a string matching {pattern}")
    if isinstance(value, str) and meta.min_length is not None and len(value) < meta.min_length:
        raise reading.refuse(at, value, f"a string of at least {meta.min_length} characters")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if meta.minimum is not None and value < meta.minimum:
            raise reading.refuse(at, value, f"a number >= {_number(meta.minimum)}")
        if meta.maximum is not None and value > meta.maximum:
            raise reading.refuse(at, value, f"a number <= {_number(meta.maximum)}")
    return value


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _expected(shape: Shape, meta: FieldSpec) -> str:
    if meta.values is not None:
        return "one of " + ", ".join(json.dumps(v) for v in meta.values)
    if shape.kind == "enum":
        return "one of " + ", ".join(json.dumps(m.value) for m in shape.base)
    if meta.codec is not None:
        return meta.codec.expected
    name = {
        "record": "object",
        "tuple": "array",
        "dict": "object",
        "any": "any JSON value",
    }.get(shape.kind) or _SCALAR_NAMES[shape.base]
    return f"{name} or null" if shape.nullable else name


def _decode_record(cls: type[R], data: Mapping[str, Any], at: str, reading: _Reading) -> R:
    kwargs: dict[str, Any] = {}
    for f in stored_fields(cls):
        if f.spec.inline:
            kwargs[f.name] = _decode_record(f.shape.base, data, at, reading)
            continue
        if f.key not in data:
            if not f.has_default:
                raise ResultsError(
                    f"{reading.source}: {reading.what} lacks the key {f.key!r} at {at}",
                    expected=f"an object with the key {f.key!r}",
                    fix=reading.fix,
                )
            continue
        kwargs[f.name] = _decode_value(data[f.key], f.shape, f.spec, f"{at}.{f.key}", reading)
    return cls(**kwargs)


def decode(
    cls: type[R],
    data: Any,
    *,
    source: str = "<results>",
    path: str = "$",
    what: str = "stored record",
    fix: str = TAMPERED_FIX,
) -> R:
    """The ``cls`` record of ``data`` (read from ``source``; ``path``: where ``data`` sits
    in it); ResultsError naming ``source``, the place and what was expected otherwise."""
    reading = _Reading(str(source), what, fix)
    if not isinstance(data, dict):
        raise reading.refuse(path, data, "object")
    return _decode_record(cls, data, path, reading)


# --------------------------------------------------------------------------- schema
# The reading check of a JSON Schema, for what a declaration does not describe itself:
# the schema of a hand-written codec, checked before its decoder runs.

_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


# An array of these (raw latency samples) is checked in one pass.
_COUNT: Mapping[str, Any] = {"type": "integer", "minimum": 0}


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("number", "integer"):
        return False
    return isinstance(value, _JSON_TYPES[name])


def schema_problem(
    value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str
) -> tuple[str, str, Any] | None:
    """``(place, what was expected, the value)`` of the first value in ``value`` that ``schema``
    refuses, else None. The subset of JSON Schema perfguard's own schemas use; tolerant
    of missing and unknown keys (see the module docstring)."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target: Any = root
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        found = schema_problem(value, target, root, where)
        if found is not None:
            return found
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = [schema_problem(value, s, root, where) for s in schema[key]]
            if all(o is not None for o in options):
                # Name the deepest option's complaint: it is the one that got furthest.
                return max((o for o in options if o is not None), key=lambda o: len(o[0]))
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is_type(value, n) for n in names):
            return where, " or ".join(names), value
    if "const" in schema and value != schema["const"]:
        return where, json.dumps(schema["const"]), value
    if "enum" in schema and not any(
        value == option and type(value) is type(option) for option in schema["enum"]
    ):
        return where, "one of " + ", ".join(json.dumps(o) for o in schema["enum"]), value
    if isinstance(value, str):
        # x-read-pattern: what a reader accepts where it is looser than what perfguard
        # writes (checked by ``validate``), e.g. a fingerprint from an older writer.
        pattern = schema.get("x-read-pattern", schema.get("pattern"))
        if isinstance(pattern, str) and not re.search(pattern, value):
            return where, f"a string matching {pattern}", value
        if len(value) < schema.get("minLength", 0):
            return where, f"a string of at least {schema['minLength']} characters", value
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return where, f"a string of at most {schema['maxLength']} characters", value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return where, f"a number >= {schema['minimum']}", value
        if "maximum" in schema and value > schema["maximum"]:
            return where, f"a number <= {schema['maximum']}", value
    elif isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        names = schema.get("propertyNames", {}).get("pattern")
        for key, item in value.items():
            if names is not None and not re.search(names, key):
                return f"{where}.{key}", f"keys matching {names}", key
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                found = schema_problem(item, sub, root, f"{where}.{key}")
                if found is not None:
                    return found
    elif isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        if items == _COUNT and all(type(v) is int and v >= 0 for v in value):
            return None  # raw samples: up to millions of them, checked in one pass
        for index, item in enumerate(value):
            found = schema_problem(item, schema["items"], root, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _scalar_schema(shape: Shape, meta: FieldSpec) -> dict[str, Any]:
    if meta.codec is not None:
        return dict(meta.codec.schema)
    if meta.values is not None and len(meta.values) == 1:
        return {"const": meta.values[0]}
    if meta.values is not None:
        return {"enum": list(meta.values)}
    if shape.kind == "enum":
        words: list[Any] = [m.value for m in shape.base]
        return {"enum": [*words, None] if shape.nullable else words}
    if shape.kind == "any":
        return {}
    name = _SCALAR_NAMES[shape.base]
    out: dict[str, Any] = {"type": [name, "null"] if shape.nullable else name}
    if meta.min_length is not None:
        out["minLength"] = meta.min_length
    if meta.pattern is not None:
        out["pattern"] = meta.pattern
    if meta.read_pattern is not None:
        # What a reader accepts where it is looser than what perfguard writes.
        out["x-read-pattern"] = meta.read_pattern
    if meta.minimum is not None:
        out["minimum"] = _bound(meta.minimum)
    if meta.maximum is not None:
        out["maximum"] = _bound(meta.maximum)
    return out


def _bound(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _value_schema(shape: Shape, meta: FieldSpec, defs: dict[str, Any]) -> dict[str, Any]:
    if shape.kind == "record":
        ref = {"$ref": f"#/$defs/{_collect(shape.base, defs)}"}
        return {"oneOf": [{"type": "null"}, ref]} if shape.nullable else ref
    if shape.kind in ("tuple", "dict"):
        assert shape.item is not None
        item = _value_schema(shape.item, meta, defs)
        kind = "array" if shape.kind == "tuple" else "object"
        out: dict[str, Any] = {"type": [kind, "null"] if shape.nullable else kind}
        if shape.kind == "tuple":
            out["items"] = item
        else:
            if meta.key_pattern is not None:
                out["propertyNames"] = {"pattern": meta.key_pattern}
            out["additionalProperties"] = item
        return out
    return _scalar_schema(shape, meta)


def _properties(cls: type[Record], defs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in stored_fields(cls):
        if f.spec.inline:
            inner, inner_required = _properties(f.shape.base, defs)
            properties.update(inner)
            required.extend(inner_required)
            continue
        shape = f.shape
        if f.spec.omit == "none":  # left out rather than written as null
            shape = dataclasses.replace(shape, nullable=False)
        schema = _value_schema(shape, f.spec, defs)
        if f.spec.description is not None:
            schema["description"] = f.spec.description
        properties[f.key] = schema
        if f.spec.omit == "never":  # always written (a reader defaults it if absent)
            required.append(f.key)
    return properties, required


def _record_schema(cls: type[Record], defs: dict[str, Any]) -> dict[str, Any]:
    properties, required = _properties(cls, defs)
    out: dict[str, Any] = {"type": "object"}
    if cls.SCHEMA_DESCRIPTION is not None:
        out["description"] = cls.SCHEMA_DESCRIPTION
    out["additionalProperties"] = False
    out["required"] = required
    out["properties"] = properties
    return out


def _collect(cls: type[Record], defs: dict[str, Any]) -> str:
    name = cls.SCHEMA_NAME
    if name not in defs:
        defs[name] = {}  # a placeholder first: a record may (one day) hold itself
        defs[name] = _record_schema(cls, defs)
    return name


def schema_defs(*classes: type[Record]) -> dict[str, Any]:
    """The ``$defs`` entries of ``classes`` and every record they hold, by name."""
    defs: dict[str, Any] = {}
    for cls in classes:
        _collect(cls, defs)
    return defs


def json_schema(cls: type[Record], *, title: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a document holding one ``cls`` record."""
    defs: dict[str, Any] = {}
    top = _record_schema(cls, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        **top,
        "$defs": dict(sorted(defs.items())),
    }
