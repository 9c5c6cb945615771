"""The one summary writer of the three sweeps: a concurrency sweep's summary.json
(`SweepSummary`, workloads/sweep.py), a server grid's (`GridSummary`, server_sweep.py) and an
SLO search's result.json (`SloSearchResult`, workloads/slo.py).

Each sweep builds its typed document from its typed rows (`SweepPointRow`, `GridRow`,
`SloProbe`: jobs/documents.py) and hands it here with the tables it shows beside it
(summary.csv, summary.txt, drawn by `csv_table` and `text_table`). The document is written as
given (no field added), secrets masked, atomically, and checked against its model
(`write_checked`); its schema is docs/schemas'.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from proctor import redact
from proctor.jobs.documents import GridSummary, SloSearchResult, SweepSummary, write_checked
from proctor.record.rundir import RunDir, write_atomic

SummaryDocument = SweepSummary | GridSummary | SloSearchResult
#: The file each summary document is, in its sweep's directory.
FILE_OF: dict[type[SummaryDocument], str] = {
    SweepSummary: "summary.json",
    GridSummary: "summary.json",
    SloSearchResult: "result.json",
}


def write_summary(
    home: RunDir, document: SummaryDocument, tables: Mapping[str, str] | None = None
) -> Path:
    """`document` into `home` (its file: FILE_OF), then each table (file name -> text)."""
    path = home.path / FILE_OF[type(document)]
    write_checked(
        redact.data(document.dump()),
        type(document),
        lambda text: write_atomic(path, text, mask=False),
    )
    for name, text in (tables or {}).items():
        write_atomic(home.path / name, text)
    return path


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 0) -> str:
    """summary.txt: columns as wide as their widest cell; the first `left` columns (names)
    flush left, the rest (figures) flush right."""
    widths = [max([len(h), *(len(r[j]) for r in rows)]) for j, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if j < left else c.rjust(w)
            for j, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), *(line(r) for r in rows)]) + "\n"


def csv_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """summary.csv: the header, then a line a row (an absent figure an empty cell)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


__all__ = [
    "FILE_OF",
    "SummaryDocument",
    "csv_table",
    "text_table",
    "write_summary",
]
