"""Kernel keys as a user types them: a full key (64 hex digits) or a unique prefix of one.

    check_prefix(text)           lowercase hex, 6..64 digits (select prints 16) -> text; else SpecError
    match(prefix, sorted_keys)   the keys starting with prefix (bisect over a sorted list)
    unique(prefix, matches, where)   the one key; none -> NotFoundError, several -> AmbiguousKeyError
                                 naming the matches (at most 8) and where they were looked up
    cursor_before(prefix)        the listing cursor (a 64-hex key) just below every key with this
                                 prefix: GET /v1/kernels?cursor=...&limit=2 starts at the first match
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from rocke_aot.errors import NotFoundError, SpecError

MIN_PREFIX = 6
_PREFIX_RE = re.compile(r"[0-9a-f]{" + str(MIN_PREFIX) + ",64}")


class AmbiguousKeyError(SpecError):
    """A key prefix that more than one kernel's key starts with (bad input: exit 2)."""


def check_prefix(text: object) -> str:
    if not isinstance(text, str) or not _PREFIX_RE.fullmatch(text):
        raise SpecError(f"a kernel key is {MIN_PREFIX} to 64 lowercase hex digits (a prefix of the 64-digit key, "
                        f"e.g. the 16 `rocke-aot select` prints), got {text!r}")
    return text


def match(prefix: str, sorted_keys: Sequence[str]) -> list[str]:
    i = bisect.bisect_left(sorted_keys, prefix)
    out = []
    while i < len(sorted_keys) and sorted_keys[i].startswith(prefix):
        out.append(sorted_keys[i])
        i += 1
    return out


def unique(prefix: str, matches: Sequence[str], where: str) -> str:
    found = sorted(set(matches))
    if not found:
        raise NotFoundError(f"no kernel key starts with {prefix} ({where})")
    if len(found) > 1:
        shown = ", ".join(found[:8]) + (f", ... ({len(found)} in all)" if len(found) > 8 else "")
        raise AmbiguousKeyError(f"key prefix {prefix} is ambiguous ({where}): {shown}; give more digits")
    return found[0]


def cursor_before(prefix: str) -> str | None:
    low = int(prefix.ljust(64, "0"), 16)
    return None if low == 0 else format(low - 1, "064x")
