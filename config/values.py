"""The kinds of value many settings share, each kind's bounds said once.

A setting's type says what it accepts (``redis_timeout_seconds: PositiveFloat``) instead of
each field repeating ``gt=0``. pydantic merges an ``Annotated`` type's constraints into the
field's metadata, so :mod:`config.problems` reads the same bounds back and a bad value is
reported exactly as before (``allowed: a number > 0``). pydantic's own ``PositiveFloat``,
``NonNegativeFloat`` and ``NonNegativeInt`` say what the settings always said; its
``PositiveInt`` would say ``> 0`` where deja's errors say ``>= 1``, hence :data:`Count`.

Only fields with exactly these bounds use them: a field with a further bound keeps its own
``Field(ge=…, le=…)``, so its message keeps the order it has.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat

__all__ = [
    "Bytes",
    "Count",
    "NonNegativeFloat",
    "NonNegativeInt",
    "PositiveFloat",
    "PrecisionTarget",
]

#: A whole number of at least one: entries, pages, blocks, connections, whole seconds.
Count = Annotated[int, Field(ge=1)]

#: A size in bytes of at least 1 KiB (a body, a file, a memory bound).
Bytes = Annotated[int, Field(ge=1024)]

#: A precision target for semantic hits: below 0.5 a hit is wrong more often than right.
PrecisionTarget = Annotated[float, Field(ge=0.5, le=1.0)]
