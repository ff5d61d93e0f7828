"""Small files read in groups: one task, one classification and one Parquet part per group.

What a small file costs is mostly fixed: planning the queries that classify its events, writing
and reading back its part, one task's round trip to a worker. Consecutive small files (in input
order, so the table's row order is unchanged) share those. Their text is read as one batch
(``batch.read_text_batch``): only parsers declaring ``batched`` see lines of several files
together, told apart by their line numbers; the others read each file alone. Classifying a
group's events at once gives each row the class it gets alone (a rule reads only its own row).
"""

from __future__ import annotations

from collections.abc import Sequence

from toranalyze.ingest.discover import InputFile
from toranalyze.ingest.streams import COMPRESSED

SMALL_FILE = 1 << 20  # estimated text below this: grouped
GROUP_TEXT = 16 << 20  # estimated text of one group at most (bounds a worker's memory)
GROUP_FILES = 64  # files of one group at most with several workers (keeps groups for all of them)
ALONE_GROUP_FILES = 1024  # ... with one worker: nothing to share, the fewer groups the less fixed cost


def text_size(file: InputFile) -> int:
    """The text a file is estimated to hold (a compressed one: ten times its size on disk)."""
    return file.size * 10 if file.path.lower().endswith(COMPRESSED) else file.size


def grouped(files: Sequence[InputFile], max_files: int = GROUP_FILES) -> list[tuple[InputFile, ...]]:
    """``files`` in order, consecutive small ones in groups of at most ``max_files``; every other
    file alone."""
    out: list[list[InputFile]] = []
    open_text = -1  # text of the group still open; -1: none open
    for f in files:
        size = text_size(f)
        if size >= SMALL_FILE:
            out.append([f])
            open_text = -1
        elif open_text >= 0 and open_text + size <= GROUP_TEXT and len(out[-1]) < max_files:
            out[-1].append(f)
            open_text += size
        else:
            out.append([f])
            open_text = size
    return [tuple(g) for g in out]
