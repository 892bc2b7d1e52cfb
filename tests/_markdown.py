"""Reading the docs' Markdown tables, for tests that hold the docs to the code."""
from __future__ import annotations


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the table whose header line is ``header`` (cells split on
    `` | ``); ValueError for a row with another number of cells than the header."""
    lines = text.splitlines()
    start = lines.index(header)
    width = header.count(" | ") + 1
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != width:
            raise ValueError(f"not a row of {width} cells: {line}")
        rows.append(cells)
    return rows
