"""csv_summary: what a CSV file holds, column by column, with Python's csv
and statistics modules. An example toolcage tool written in Python."""

import csv
import io
import statistics
from typing import Optional

from toolcage import Result, Tool, ToolError, tool

__all__ = ["Tool"]


def _number(cell: str) -> Optional[float]:
    try:
        return float(cell)
    except ValueError:
        return None


@tool(read_only=True, idempotent=True, title="Summarise a CSV table")
def csv_summary(
    path: Optional[str] = None,
    text: Optional[str] = None,
    delimiter: str = ",",
    top: int = 3,
) -> Result:
    """Summarises a CSV table (header row first), given as a file `path` under
    a mounted directory or as `text`: the row count and, per column, the
    min/mean/max of a numeric column or the most frequent values of any
    other."""
    if (path is None) == (text is None):
        raise ToolError("give exactly one of `path` (a CSV file) or `text` (CSV content)")
    if len(delimiter) != 1:
        raise ToolError("`delimiter` must be one character, such as \",\" or \";\"")
    if path is not None:
        with open(path, newline="", encoding="utf-8") as file:
            text = file.read()
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    if not rows:
        raise ToolError("the CSV is empty: it needs at least a header row")
    header, body = rows[0], rows[1:]
    columns = []
    lines = [f"{len(body)} rows, {len(header)} columns"]
    for index, name in enumerate(header):
        cells = [row[index] for row in body if index < len(row) and row[index] != ""]
        numbers = [_number(cell) for cell in cells]
        column = {"name": name, "filled": len(cells)}
        if cells and all(n is not None for n in numbers):
            column.update(
                kind="number",
                min=min(numbers),
                mean=round(statistics.fmean(numbers), 6),
                max=max(numbers),
            )
            lines.append(
                f"{name}: number, min {column['min']:g}, mean {column['mean']:g}, max {column['max']:g}"
            )
        else:
            counts: dict[str, int] = {}
            for cell in cells:
                counts[cell] = counts.get(cell, 0) + 1
            ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
            column.update(kind="text", distinct=len(counts), top=[list(kv) for kv in ranked])
            shown = ", ".join(f"{value} ({count})" for value, count in ranked)
            lines.append(f"{name}: text, {len(counts)} distinct, most frequent: {shown}")
        columns.append(column)
    return Result("\n".join(lines), {"rows": len(body), "columns": columns})
