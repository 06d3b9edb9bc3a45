"""A fetched code object against the record that came with it, as an answer: one check for
every reader above the lowering (the service's store-to-store client, the runner's server
source).

    checked_metadata(code_object, arch, metadata, what) -> the metadata to keep and launch by
        validate(code_object, arch)          a code object for that arch (aot/codeobject.py)
        record_metadata(metadata, info)      the record's resources and launch contract the
                                             object's (kernel name, kernarg size and layout,
                                             block within its maximum work-group size)
        CodeObjectError / RecordError ──> AnswerMismatchError("{what}: {Type}: {why}"): a source
        answered bytes its record does not describe; nothing is kept or launched

Not imported by the lowering (aot/recipe.py's closure starts at aot.lower and aot.codeobject):
this module shapes no bytes, so it is outside the recipe digest.
"""

from __future__ import annotations

from typing import Any

from rocke_aot.aot.codeobject import record_metadata, validate
from rocke_aot.cache.keys import thaw
from rocke_aot.errors import AnswerMismatchError, CodeObjectError
from rocke_aot.record import RecordError
from rocke_aot.targets import Target


def checked_metadata(code_object: bytes, arch: str, metadata: Any, what: str) -> dict[str, Any]:
    """The metadata to keep for ``code_object`` (record_metadata over ``metadata``, a record's,
    frozen or not), or AnswerMismatchError("{what}: {Type}: {why}") when the object is not one
    for ``arch`` or the record does not describe it."""
    target = Target.parse(arch)  # the record's arch, parsed where the answer is read (a bad one: SpecError)
    try:
        return record_metadata(thaw(metadata), validate(code_object, target))
    except (CodeObjectError, RecordError) as e:
        raise AnswerMismatchError(f"{what}: {type(e).__name__}: {e}") from None


__all__ = ["checked_metadata"]
