"""Strings from telemetry or the store, made safe for the report's HTML.

Every string that came from telemetry or the store (route, model and revision names, alert
summaries, tag values) goes through :func:`text`: HTML-escaped, control and bidi-override
characters shown as escapes, and wrapped in ``<bdi>`` so a right-to-left name cannot reorder
the words around it. Its own module so that each section of the page can use it without
importing the page.
"""

from __future__ import annotations

import html
import unicodedata
from typing import Any

__all__ = ["num", "plain", "text"]

# Bidi embeddings, overrides and isolates: they would reorder the text that follows them.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _display(value: Any) -> str:
    """Control and bidi-override characters as visible escapes; everything else as is."""
    s = str(value)
    if s.isprintable() and not _BIDI_CONTROLS.intersection(s):
        return s
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) == "Cc" or ch in _BIDI_CONTROLS else ch
        for ch in s
    )


def text(value: Any) -> str:
    r"""Any data string, safe as HTML element content.

    >>> text('<b>"chat" & co</b>')
    '<bdi>&lt;b&gt;&quot;chat&quot; &amp; co&lt;/b&gt;</bdi>'
    >>> text("evil\u202eexe\x1b[31m")
    '<bdi>evil\\u202eexe\\x1b[31m</bdi>'
    """
    return f"<bdi>{plain(value)}</bdi>"


def plain(value: Any) -> str:
    """A data string for attribute values, ``<title>`` and ``<pre>``: escaped, no markup."""
    return html.escape(_display(value), quote=True)


def num(value: Any, spec: str = ".3f") -> str:
    """A number as ``spec``, ``n/a`` for anything else (``None``).

    >>> num(0.51234), num(None), num(2, ".2f")
    ('0.512', 'n/a', '2.00')
    """
    return "n/a" if not isinstance(value, int | float) else format(value, spec)
