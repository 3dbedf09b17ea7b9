"""Content checksums for the artefacts the pipeline hands on (docs/contracts.md, "Checksums").

Each artefact carries the SHA-256 of its *content*, inside itself, so a file that travels alone
(a model version's `model.pt` in the registry, one Parquet part of a raw tree) stays checkable:

- Parquet (raw snapshots, `tokens.parquet`): the key-value metadata entry `pmoss.content_sha256`,
  a digest of the decoded columns (names, types, validity, list lengths, values).
- Small files next to a dataset's tokens (`stats.json`, `dataset.json`, `machines/*.yaml`): the
  SHA-256 of their bytes, listed in the tokens file's metadata `pmoss.files_sha256`.
- Model bundles (`model.pt`): the key `sha256`, a digest of config, stats, info and every tensor.

A changed byte either fails to decode, changes the content (the digest no longer matches), changes
a recorded digest, or leaves the decoded content identical (harmless). Readers verify on every
load and refuse a file without a digest: a flipped byte in the key's name must not pass as "old".
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from pmoss.contracts.errors import ContractError, brief

CONTENT_KEY = b"pmoss.content_sha256"
FILES_KEY = b"pmoss.files_sha256"


class ChecksumError(ContractError):
    pass


def table_digest(table: Any) -> str:
    """SHA-256 of a pyarrow table's logical content: independent of chunking and of the bytes a
    writer leaves under null slots, so the writer's in-memory table and the read-back agree."""
    h = hashlib.sha256()
    for field, column in zip(table.schema, table.columns, strict=True):
        h.update(f"{field.name}\n".encode())
        _feed(h, column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    return h.hexdigest()


def _feed(h: Any, arr: Any) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    nested = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    # the list's child field name is left out: writers call it "item" and Parquet readers "element"
    h.update(f"{'list' if nested else t}:{len(arr)}\n".encode())
    h.update(np.packbits(arr.is_valid().to_numpy(zero_copy_only=False)).tobytes())
    if nested:
        h.update(pc.fill_null(pc.list_value_length(arr), 0).to_numpy().astype("<i8").tobytes())
        _feed(h, arr.flatten())  # values of non-null lists only, slicing offsets applied
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        filled = pc.fill_null(arr, "")  # null slots as "" (what lies under them is no content)
        offsets = np.frombuffer(filled.buffers()[1], dtype="<i4" if pa.types.is_string(t) else "<i8")[filled.offset : filled.offset + len(filled) + 1]
        data = filled.buffers()[2]
        h.update(np.diff(offsets).astype("<i8").tobytes())
        h.update(memoryview(data)[offsets[0] : offsets[-1]] if data is not None and len(filled) else b"")
    elif pa.types.is_timestamp(t):
        _feed(h, arr.cast(pa.int64()))
    elif pa.types.is_boolean(t):
        h.update(pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
        h.update(values.astype(values.dtype.newbyteorder("<")).tobytes())
    else:  # no writer of ours makes other types; a damaged schema may: hash them slowly but surely
        h.update(repr(arr.to_pylist()).encode())


def stamp_table(table: Any, files: dict[str, str] | None = None) -> Any:
    """`table` with its content digest (and the digests of companion `files`) in its metadata."""
    meta = dict(table.schema.metadata or {})
    meta[CONTENT_KEY] = table_digest(table).encode()
    if files is not None:
        meta[FILES_KEY] = json.dumps(files, sort_keys=True).encode()
    return table.replace_schema_metadata(meta)


def verify_table(table: Any, path: Path) -> None:
    """Raise a one-line ChecksumError naming `path` unless `table` matches its recorded digest."""
    recorded = (table.schema.metadata or {}).get(CONTENT_KEY)
    if recorded is None:
        raise ChecksumError(f"{path}: no content checksum ({CONTENT_KEY.decode()}); damaged, or written by an older pmoss: rewrite it")
    import pyarrow as pa

    try:
        digest = table_digest(table)
    except (UnicodeDecodeError, pa.ArrowException) as e:  # a damaged name or list of a table that decoded
        raise ChecksumError(f"{path}: undecodable content ({brief(e)}), the file is corrupt; restore or rebuild it") from e
    if recorded.decode(errors="replace") != digest:
        raise ChecksumError(f"{path}: content checksum mismatch, the file is corrupt; restore or rebuild it")


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_files(table: Any, root: Path, tokens: Path) -> dict[str, str]:
    """Check the companion files listed in `tokens`' metadata (paths relative to `root`); returns
    that list (name -> digest), so a reader loads only files it vouches for."""
    raw = (table.schema.metadata or {}).get(FILES_KEY)
    try:
        listed = json.loads(raw) if raw is not None else None
    except ValueError:
        listed = None
    if not isinstance(listed, dict):
        raise ChecksumError(f"{tokens}: no readable list of companion-file checksums ({FILES_KEY.decode()}); rebuild the dataset")
    for name, digest in sorted(listed.items()):
        f = root / name
        if not f.is_file():
            raise ChecksumError(f"{f}: missing (listed in {tokens}); rebuild the dataset")
        if file_digest(f) != digest:
            raise ChecksumError(f"{f}: checksum mismatch with {tokens}, the file is corrupt; restore or rebuild the dataset")
    return listed

