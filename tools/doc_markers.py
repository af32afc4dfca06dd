"""Generated tables inside hand-written docs: the text between two marker comments is replaced."""

from __future__ import annotations

from pathlib import Path


def replace_between(doc: Path, begin: str, end: str, text: str) -> None:
    """Put ``text`` between the markers ``begin`` and ``end`` of ``doc`` (exits if they are missing)."""
    content = doc.read_text()
    if begin not in content or end not in content:
        raise SystemExit(f"{doc} has no {begin} ... {end} markers")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}")
