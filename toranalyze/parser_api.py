"""The parser API: everything a parser plugin may use from toranalyze, and the contract it honours.

A parser (built in or third party) imports toranalyze only through this module; the names in
``__all__`` are the whole API. Parsers are found through the entry-point group
``toranalyze.parsers`` (``ENTRY_POINT_GROUP``); the built-in ones are registered there too.

The contract
------------
A parser is an object (an instance, or a class toranalyze instantiates) with

* ``name`` (unique), ``source`` (log family), and optionally ``priority``
  (lower wins when two parsers record the same line as the same kind; default 100);
* ``sniff(head: str) -> bool``: True when the parser *claims the whole file*
  because its head (the first 16 KiB, decompressed) shows a document format only
  it reads (a ``sacct`` table, Kubernetes JSON/YAML). Plain text logs are claimed
  by nobody;
* ``extract(lines: LazyFrame) -> LazyFrame | None``: line rules. Given the
  prepared lines of a block of a text log (``LINE_SCHEMA``), return the events it
  recognises in ``RAW_SCHEMA`` (via ``conform_raw``), or None when the parser has
  no line rules. Every text log runs through every parser's ``extract``: a Slurm
  job's stdout mixes srun, NCCL and trainer records;
* ``sniff_bytes(head: bytes) -> bool`` (optional): True when the parser claims a
  *binary* file by its first bytes (text sniffs never see binary files); ``parse``
  then reads it;
* ``parse(path: str) -> LazyFrame``: parse one whole file (documents); ``Parser``
  implements it for line parsers by reading the file through ``extract``
  (``read_text_events``);
* ``noise: tuple[str, ...]`` (optional): regexes for lines the parser understands
  but does not record (NCCL INFO chatter, timer lines); they count as covered;
* ``gates: tuple[str, ...]`` (optional): regexes of which every record the parser
  can find needs one somewhere in the block read (as if searched in each line's
  ``raw`` and peeled ``text``). A block in which none occurs skips the parser's
  ``extract``. Empty (the default) means the parser always runs. Build literal
  gates with ``literal_gate``;
* ``batched: bool`` (optional): True when ``extract`` may be given the lines of
  several small files at once, file k numbered from ``k * FILE_LINES + 1``; the
  parser then keeps every fill, running count and record within one file
  (``file_key``, ``file_starts``);
* ``carry(lines, rows) -> DataFrame`` (optional): the few lines of a block the
  next block of the same file should read again ahead of its own (state a rule
  takes from far above, such as a progress bar's start). Without it, a parser's
  last record is read again when it reaches the end of a block.

Output is validated: unknown kinds or severities, missing columns or wrong dtypes
fail with an error naming the parser. Parsers never set ``failure_class``: rules
files classify events.

Constants
---------
``RAW_SCHEMA``
    the columns and dtypes ``extract`` and ``parse`` return.
``LINE_SCHEMA``
    the prepared lines ``extract`` is given: ``line``, ``raw``, ``text`` (prefixes
    peeled), ``p_ts``/``p_off`` (a peeled timestamp and its offset), ``p_node``,
    ``p_rank``, ``p_local``.
``NAIVE_US``
    the dtype of a timestamp as written (naive, microseconds).
``ISO_PATTERN``
    a regex matching an ISO-8601 stamp (date, time, optional fraction and zone).
``FILE_LINES``
    the line-number stride between the files of a batched block.
``BLOCK_BYTES``
    the size of the blocks a text file is read in (``Chunks``).
``ENTRY_POINT_GROUP``
    the entry-point group parsers are registered under.
"""

from __future__ import annotations

from toranalyze.ingest.blocks import BLOCK_BYTES, Chunks
from toranalyze.ingest.clock import ISO_PATTERN, offset_iso, ts_epoch_ms, ts_glog, ts_iso, ts_month_name
from toranalyze.ingest.contract import Parser, ParserPlugin
from toranalyze.ingest.lines import LINE_SCHEMA, lines_from_strings
from toranalyze.ingest.numbering import FILE_LINES, file_key, file_starts
from toranalyze.ingest.reader import FileResult, read_text_events
from toranalyze.ingest.registry import ENTRY_POINT_GROUP
from toranalyze.ingest.rule_tools import contains_any, fill_where, literal_gate
from toranalyze.ingest.streams import read_head, read_text
from toranalyze.schema import NAIVE_US, RAW_SCHEMA, conform_raw, conform_to, empty_raw

__all__ = [
    # what a parser is
    "ENTRY_POINT_GROUP",
    "Parser",
    "ParserPlugin",
    # what extract is given and returns
    "LINE_SCHEMA",
    "NAIVE_US",
    "RAW_SCHEMA",
    "conform_raw",
    "conform_to",
    "empty_raw",
    "lines_from_strings",
    # building rules
    "FILE_LINES",
    "contains_any",
    "file_key",
    "file_starts",
    "fill_where",
    "literal_gate",
    # times as written
    "ISO_PATTERN",
    "offset_iso",
    "ts_epoch_ms",
    "ts_glog",
    "ts_iso",
    "ts_month_name",
    # reading files (document parsers)
    "BLOCK_BYTES",
    "Chunks",
    "FileResult",
    "read_head",
    "read_text",
    "read_text_events",
]
