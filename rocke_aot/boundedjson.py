"""A bounded JSON reader: size, depth, value-count and string limits applied before objects are built.

    loads(data, limits) -> value           (bytes or str; JSONLimitError, a SpecError, when over a limit
                                             or malformed; its message at most MAX_MESSAGE characters)
        1. len(data) <= limits.max_bytes                        nothing scanned beyond that
        2. one scan of the text by a compiled regular expression (strings as whole tokens, so a
           bracket inside a string never counts): nesting depth <= max_depth, structural tokens
           (every '[', '{' and ',': at least one per value) <= max_items, each string token <=
           max_string characters; the scan stops at the first excess, so a 60 MiB text of '{}'
           costs a scan up to the limit, never 60 MiB of Python dicts. Before it, a proof by
           whole-text operations in C (_within: the same string tokens removed, the brackets'
           running sum) passes most texts with no Python step per token; unproven, the scan decides
        3. json.loads of the text that passed (no NaN, Infinity or -Infinity: refused, not floats;
           a key given twice in one object refused): the objects built are bounded by step 2
    check(data, limits) -> None            steps 1-2 only (for a parser of its own, e.g. pydantic's)

Limits(max_bytes, max_depth, max_items, max_string): one value per reader, named where it is
used (the service's request bodies, a bundle's manifest; the client's answers and trust
metadata use the same reader with their own figures). docs/reliability.md lists them.

Vocabulary layer: no dependency beyond the standard library; every layer may import it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, TypeGuard

from rocke_aot.errors import SpecError

MAX_MESSAGE = 240  # characters of any error message this module raises (a 120-million-character one was seen)


class JSONLimitError(SpecError):
    """JSON over a bound (bytes, depth, values, string length) or malformed; ``limit`` names which."""

    def __init__(self, message: str, limit: str = "malformed"):
        super().__init__(cut(message))
        self.limit = limit


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_depth: int = 32
    max_items: int = 100_000
    max_string: int = 1 << 20

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_depth", "max_items", "max_string"):
            v = getattr(self, name)
            if not is_int(v) or v < 1:
                raise SpecError(f"JSON limit {name} must be a positive int, got {v!r}")


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer: an int that is not a bool (Python's True is an int; JSON's true is no count,
    no size, no index). Every layer's check of a count or bound that arrived as a value asks this."""
    return isinstance(value, int) and not isinstance(value, bool)


def cut(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` at most ``limit`` characters (an ellipsis and the count of the rest when cut)."""
    text = str(text)
    if len(text) <= limit:
        return text
    more = f"... (+{len(text) - limit + 40} characters)"
    return text[: max(0, limit - len(more))] + more


# A string token as a whole (the unrolled form: linear, no backtracking), or one structural
# character; the group that matched says which (m.lastindex: 1 string, 2 open, 3 comma, 4 close).
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_RX = "(" + _STRING + r")|([\[{])|(,)|([\]}])"
_TOKENS_STR = re.compile(_RX, re.S)
_TOKENS_BYTES = re.compile(_RX.encode(), re.S)
_STRUCTURAL = tuple(ord(c) for c in "[{,")
# The fast proof (_within): the same string tokens (the string alternative alone finds exactly the
# tokens the scan above finds: where the scan matches a structural character or skips one, the
# string pattern fails there too and moves one character on), then what is left of the brackets.
_STRINGS_STR, _STRINGS_BYTES = re.compile(_STRING, re.S), re.compile(_STRING.encode(), re.S)
_NOT_BRACKET_STR, _NOT_BRACKET_BYTES = re.compile(r"[^\[\]{}]+"), re.compile(rb"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1, ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _within(data: bytes | str, limits: Limits) -> bool:
    """True when ``data`` is proven within the string, value and depth bounds by whole-text
    operations that run in C (no Python step per token); False when not proven (then check's
    token scan decides, and names the first excess). Sound because: no string token is longer
    than the text; every '[', '{' and ',' the scan counts is one of the text's; the depth is the
    scan's own (the running sum of the brackets outside the string tokens). Memory: two copies of
    a text already within max_bytes, none per token."""
    if len(data) > limits.max_string + 2:
        return False
    if isinstance(data, bytes):
        if data.count(b"[") + data.count(b"{") + data.count(b",") > limits.max_items:
            return False
        brackets: bytes | str = _NOT_BRACKET_BYTES.sub(b"", _STRINGS_BYTES.sub(b"", data))
    else:
        if data.count("[") + data.count("{") + data.count(",") > limits.max_items:
            return False
        brackets = _NOT_BRACKET_STR.sub("", _STRINGS_STR.sub("", data))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= limits.max_depth


def check(data: bytes | bytearray | memoryview | str, limits: Limits, what: str = "JSON") -> None:
    """Steps 1-2 of the module doc: JSONLimitError at the first bound exceeded."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, (bytes, str)):
        raise JSONLimitError(f"{what}: expected bytes or text, got {type(data).__name__}", "type")
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise JSONLimitError(f"{what}: {size} bytes, over the {limits.max_bytes}-byte bound", "bytes")
    if _within(data, limits):  # most texts: proven within the bounds without a Python step per token
        return
    tokens = _TOKENS_BYTES.finditer(data) if isinstance(data, bytes) else _TOKENS_STR.finditer(data)
    depth = items = 0
    max_depth, max_items, max_string = limits.max_depth, limits.max_items, limits.max_string + 2
    for m in tokens:
        kind = m.lastindex
        if kind == 1:
            if m.end() - m.start() > max_string:
                raise JSONLimitError(f"{what}: a string of {m.end() - m.start() - 2} characters at offset "
                                     f"{m.start()}, over the {limits.max_string} bound", "string")
        elif kind == 2:
            depth += 1
            items += 1
            if depth > max_depth:
                raise JSONLimitError(f"{what}: nested deeper than {max_depth} at offset {m.start()}", "depth")
            if items > max_items:
                raise JSONLimitError(f"{what}: more than {max_items} values (at offset {m.start()})", "items")
        elif kind == 3:
            items += 1
            if items > max_items:
                raise JSONLimitError(f"{what}: more than {max_items} values (at offset {m.start()})", "items")
        else:
            depth -= 1


def _no_constant(name: str) -> Any:
    raise JSONLimitError(f"{name} is not a JSON number", "malformed")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = None
        for k, _ in pairs:
            if k in seen:
                dup = k
                break
            seen.add(k)
        raise JSONLimitError(f"key {cut(repr(dup), 80)} given twice in one object", "malformed")
    return out


def loads(data: bytes | bytearray | memoryview | str, limits: Limits, what: str = "JSON", *,
          checked: bool = False) -> Any:
    """The value of ``data`` if it is JSON within ``limits`` (module doc), else JSONLimitError.
    ``checked``: the caller holds proof that these very bytes passed check() with these limits
    before (their sha256 recorded when they did: client/trusted.py's offline snapshot), so the
    scan is not repeated; the parse and its duplicate-key and constant refusals still run."""
    if not checked:
        check(data, limits, what)
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONLimitError(f"{what}: not UTF-8 ({cut(str(e), 120)})") from None
    try:
        return json.loads(data, parse_constant=_no_constant, object_pairs_hook=_pairs)
    except JSONLimitError as e:
        raise JSONLimitError(f"{what}: {e}", e.limit) from None
    except (ValueError, RecursionError) as e:
        raise JSONLimitError(f"{what}: not JSON ({type(e).__name__}: {cut(str(e), 160)})") from None


__all__ = ["JSONLimitError", "Limits", "MAX_MESSAGE", "check", "cut", "loads"]
