"""Plain JSON of what detectors hold: numpy scalars and arrays, tuples, non-string keys.

One set of orjson options for detector evidence in alerts and reports and for the store's
JSON columns, so that a value reads back the same wherever it was written.

>>> import numpy as np
>>> jsonable({"k": np.int64(3), 2: (np.float32(0.5),)})
{'k': 3, '2': [0.5]}
>>> json_text({"k": np.bool_(True)})
'{"k":true}'
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["JSON_OPTIONS", "json_text", "jsonable"]

JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def json_text(obj: Any) -> str:
    """``obj`` as JSON text."""
    return orjson.dumps(obj, option=JSON_OPTIONS).decode()


def jsonable(data: Any) -> Any:
    """``data`` in plain JSON types (numpy scalars and tuples appear in detector evidence)."""
    return orjson.loads(orjson.dumps(data, option=JSON_OPTIONS))
