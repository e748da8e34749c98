"""A chunked on-disk graph: the input of partitioning for graphs larger than one process's memory.

Like DGL's chunked graph format, a graph is a folder of fixed-size `.npy` chunks plus a JSON
manifest, so a reader touches one chunk at a time (memory-mapped) and nothing needs the whole
edge list or feature matrix in memory::

    root/
      manifest.json          written LAST: a folder without it is incomplete
      edges/000000.npy       int32 (int64 when N >= 2^31) [2, c]: row 0 sources, row 1 targets;
                             every chunk holds `chunk_edges` edges except the last
      nodes/<name>/000000.npy  node data in node-id order, `chunk_nodes` rows per chunk:
                             x float32 / float16 [c, F], y int64 [c], train/val/test_mask bool [c],
                             time int64 [c] (temporal graphs)

The manifest holds `format`, `version`, `num_nodes`, `num_edges`, `num_classes`, the chunk
lists (file, count, bytes, xxh3 checksum of the file) per edge / node array, and two layout
flags the streaming partitioner uses: `sorted_by_src` (edges ordered by source, so a node's out-edges are consecutive) and
`symmetric` (every edge's reverse is present, so out-edges are all of a node's neighbours).
Edge ids are positions in the concatenated chunks, as in `edge_index`.

`ChunkedWriter` writes into `<root>.tmp-<pid>` and renames it to `root` after the manifest, so
an interrupted writer never leaves a folder that loads; `clean_stale` removes what a killed
writer (or generator: `<root>.spill-<pid>`) left, once its pid is gone.

Trust: opening checks every chunk file's size against the manifest (a truncated chunk is one
line before any work); each chunk is read into memory and its checksum compared as it is read
(a flipped bit is refused, not partitioned), and every edge chunk's ids are bounds-checked
before any caller (numba kernels index without checks) sees them. Errors name the file. `write_data` converts an in-memory
homogeneous `Data`; `synthetic_stream.generate_products_chunked` streams the generator.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from app.config import ConfigError
from app.fsutil import full_disk_named, pid_alive
from app.labels import check_labels

FORMAT = "distgnn-chunked"
VERSION = 2  # 2: per-chunk bytes + checksum (version 1 folders are written again)
MANIFEST = "manifest.json"
CHUNK_EDGES = 1 << 22  # 4M edges: 32 MiB per int32 chunk
CHUNK_NODES = 1 << 18  # 256k rows: ~100 MiB of float32 features at F = 100
NODE_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask", "time")


class ChunkedGraphError(ValueError):
    """A chunked graph folder is missing, incomplete or inconsistent."""


REWRITE_HINT = "delete the folder so it is written again (or write it again from the source)"


def clean_stale(root: str | os.PathLike) -> list[Path]:
    """Remove `<root>.tmp-<pid>` / `<root>.spill-<pid>` / `<root>.old-<pid>` of dead pids.

    A writer killed by SIGKILL (or a power cut) runs no cleanup; its pid then no longer
    runs, so the next writer of the same root deletes what it left (GBs at stream scale).
    """
    root = Path(root)
    removed = []
    for kind in ("tmp", "spill", "old"):
        for path in root.parent.glob(f"{root.name}.{kind}-*"):
            pid = path.name.rsplit("-", 1)[1]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def is_current(root: str | os.PathLike) -> bool:
    """Whether `root` holds a complete chunked graph of this VERSION (older ones lack the
    checksums readers verify, so they are written again)."""
    try:
        manifest = json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("format") == FORMAT and manifest.get("version") == VERSION


def check_ids(ids: np.ndarray, num_nodes: int, where: str) -> None:
    """Refuse a node id outside [0, num_nodes): kernels downstream index without checks."""
    if ids.size == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= num_nodes:
        bad = lo if lo < 0 else hi
        raise ChunkedGraphError(
            f"{where}: node id {bad} out of range [0, {num_nodes}); the edge list is corrupt "
            f"or not of this graph: {REWRITE_HINT}"
        )


_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _save_chunk(path: Path, array: np.ndarray) -> dict[str, Any]:
    """`np.save` plus the manifest fields that let a reader trust the file: bytes, xxh3."""
    with full_disk_named(path):
        np.save(path, array)
    h = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            h.update(block)
    return {"bytes": path.stat().st_size, "xxh3": h.hexdigest()}


def id_dtype(num_nodes: int) -> np.dtype:
    """The narrowest id type for `num_nodes` (int32 halves the disk and page cache)."""
    return np.dtype(np.int32 if num_nodes < 2**31 else np.int64)


def disk_bytes(num_nodes: int, num_edges: int, num_features: int, temporal: bool) -> int:
    """Bytes of a chunked graph's files: edge ids, float32 `x`, int64 `y`, three bool masks,
    int64 `time` (temporal), and a .npy header per chunk (the manifest is a few KB)."""
    edges = 2 * id_dtype(num_nodes).itemsize * num_edges
    per_node = 4 * num_features + 8 + 3 + (8 if temporal else 0)
    chunks = -(-num_edges // CHUNK_EDGES) + 6 * -(-num_nodes // CHUNK_NODES)
    return edges + per_node * num_nodes + 128 * chunks


class ChunkedWriter:
    """Appends edges and node rows, cutting them into fixed-size chunks as they arrive.

    Only one chunk per stream is buffered, so memory is O(chunk), whatever the graph size.
    Use as a context manager: the folder is installed by `finish`, removed on error.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        num_nodes: int,
        chunk_edges: int = CHUNK_EDGES,
        chunk_nodes: int = CHUNK_NODES,
    ) -> None:
        self.root = Path(root)
        self.tmp = self.root.parent / f"{self.root.name}.tmp-{os.getpid()}"
        self.num_nodes = num_nodes
        self.chunk_edges, self.chunk_nodes = chunk_edges, chunk_nodes
        self.dtype = id_dtype(num_nodes)
        self.edge_buf: list[np.ndarray] = []
        self.edge_chunks: list[dict[str, Any]] = []
        self.node_bufs: dict[str, list[np.ndarray]] = {}
        self.node_chunks: dict[str, list[dict[str, Any]]] = {}
        self.node_dtypes: dict[str, str] = {}
        self.last_src = -1
        self.sorted_by_src = True

    def __enter__(self) -> ChunkedWriter:
        clean_stale(self.root)
        shutil.rmtree(self.tmp, ignore_errors=True)
        (self.tmp / "edges").mkdir(parents=True)
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def add_edges(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Append edges (their ids continue from the previous call); ids must be < num_nodes."""
        if len(src) == 0:
            return
        where = f"edges {sum(c['count'] for c in self.edge_chunks)}+ written to {self.root}"
        check_ids(np.asarray(src), self.num_nodes, where)
        check_ids(np.asarray(dst), self.num_nodes, where)
        if self.sorted_by_src:
            self.sorted_by_src = bool(src[0] >= self.last_src and np.all(src[1:] >= src[:-1]))
        self.last_src = int(src[-1])
        self.edge_buf.append(np.stack([src.astype(self.dtype), dst.astype(self.dtype)]))
        while sum(b.shape[1] for b in self.edge_buf) >= self.chunk_edges:
            self._flush_edges(self.chunk_edges)

    def _flush_edges(self, size: int) -> None:
        both = np.concatenate(self.edge_buf, axis=1) if len(self.edge_buf) > 1 else self.edge_buf[0]
        rel = f"edges/{len(self.edge_chunks):06d}.npy"
        trust = _save_chunk(self.tmp / rel, np.ascontiguousarray(both[:, :size]))
        self.edge_chunks.append({"file": rel, "count": int(min(size, both.shape[1])), **trust})
        self.edge_buf = [both[:, size:]] if both.shape[1] > size else []

    def add_nodes(self, name: str, rows: np.ndarray) -> None:
        """Append the next rows (in node-id order) of node array `name`."""
        if len(rows) == 0:
            return
        self.node_dtypes.setdefault(name, str(rows.dtype))
        self.node_bufs.setdefault(name, []).append(rows)
        while sum(len(b) for b in self.node_bufs[name]) >= self.chunk_nodes:
            self._flush_nodes(name, self.chunk_nodes)

    def _flush_nodes(self, name: str, size: int) -> None:
        buf = self.node_bufs[name]
        rows = np.concatenate(buf) if len(buf) > 1 else buf[0]
        chunks = self.node_chunks.setdefault(name, [])
        rel = f"nodes/{name}/{len(chunks):06d}.npy"
        (self.tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        trust = _save_chunk(self.tmp / rel, np.ascontiguousarray(rows[:size]))
        chunks.append({"file": rel, "count": int(min(size, len(rows))), **trust})
        self.node_bufs[name] = [rows[size:]] if len(rows) > size else []

    def finish(self, symmetric: bool = False, **extra: Any) -> Path:
        """Flush the tails, write the manifest last and install the folder at `root`; with a
        `num_classes`, the labels written must be in range (`app.labels`)."""
        if self.edge_buf:
            self._flush_edges(sum(b.shape[1] for b in self.edge_buf))
        for name, buf in self.node_bufs.items():
            if buf:
                self._flush_nodes(name, sum(len(b) for b in buf))
        nodes = {}
        for name, chunks in self.node_chunks.items():
            rows = sum(c["count"] for c in chunks)
            if rows != self.num_nodes:
                raise ChunkedGraphError(
                    f"node array {name!r} has {rows} rows, not {self.num_nodes}"
                )
            nodes[name] = {"dtype": self.node_dtypes[name], "chunks": chunks}
        if extra.get("num_classes") is not None:
            for chunk in self.node_chunks.get("y", []):
                y = np.load(self.tmp / chunk["file"])
                check_labels(y, int(extra["num_classes"]), self.root / chunk["file"])
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "num_nodes": self.num_nodes,
            "num_edges": sum(c["count"] for c in self.edge_chunks),
            "sorted_by_src": self.sorted_by_src,
            "symmetric": symmetric,
            "edges": {"dtype": str(self.dtype), "chunks": self.edge_chunks},
            "nodes": nodes,
            **extra,
        }
        with full_disk_named(self.tmp / MANIFEST):
            (self.tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        old = self.root.parent / f"{self.root.name}.old-{os.getpid()}"
        if self.root.exists():
            os.replace(self.root, old)
        os.replace(self.tmp, self.root)
        shutil.rmtree(old, ignore_errors=True)
        return self.root


class ChunkedGraph:
    """Read side: the manifest, plus iterators that read and verify one chunk at a time."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        path = self.root / MANIFEST
        if not path.is_file():
            raise ChunkedGraphError(
                f"{path} missing: not a (complete) chunked graph; write it again "
                "(an interrupted writer leaves only <root>.tmp-<pid>)"
            )
        try:
            self.manifest = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ChunkedGraphError(f"{path}: not valid JSON ({err}); {REWRITE_HINT}") from err
        if self.manifest.get("format") != FORMAT or self.manifest.get("version") != VERSION:
            raise ChunkedGraphError(
                f"{path}: format {self.manifest.get('format')!r} version "
                f"{self.manifest.get('version')!r}, expected {FORMAT!r} version {VERSION}; "
                f"{REWRITE_HINT}"
            )
        self.num_nodes = int(self.manifest["num_nodes"])
        self.num_edges = int(self.manifest["num_edges"])
        self.sorted_by_src = bool(self.manifest["sorted_by_src"])
        self.symmetric = bool(self.manifest["symmetric"])
        self._check_sizes()

    def _chunks(self) -> Iterator[dict[str, Any]]:
        yield from self.manifest["edges"]["chunks"]
        for array in self.manifest["nodes"].values():
            yield from array["chunks"]

    def _check_sizes(self) -> None:
        """Every chunk present with the manifest's byte count, and the chunks' counts adding up
        to its `num_nodes` / `num_edges`: a truncated or missing chunk or an edited count is one
        line here, before the first pass, not a crash minutes into partitioning."""
        path = self.root / MANIFEST
        counts = {"edges": (self.manifest["edges"], self.num_edges)}
        counts |= {
            f"node array {k!r}": (a, self.num_nodes) for k, a in self.manifest["nodes"].items()
        }
        for what, (array, want) in counts.items():
            got = sum(int(c["count"]) for c in array["chunks"])
            if got != want:
                key = "num_edges" if what == "edges" else "num_nodes"
                raise ChunkedGraphError(
                    f"{path}: {key}={want} but the chunks of its {what} hold {got}; {REWRITE_HINT}"
                )
        for chunk in self._chunks():
            path = self.root / chunk["file"]
            try:
                size = path.stat().st_size
            except OSError:
                raise ChunkedGraphError(f"{path}: chunk missing; {REWRITE_HINT}") from None
            if size != chunk["bytes"]:
                raise ChunkedGraphError(
                    f"{path}: {size} bytes, the manifest says {chunk['bytes']} (truncated or "
                    f"replaced); {REWRITE_HINT}"
                )

    @property
    def num_features(self) -> int:
        """Columns of `x` (0 without features), from the first chunk's header."""
        if "x" not in self.manifest["nodes"]:
            return 0
        first = self.manifest["nodes"]["x"]["chunks"][0]["file"]
        try:
            shape = np.load(self.root / first, mmap_mode="r").shape
        except (OSError, ValueError) as err:
            msg = f"{self.root / first}: unreadable ({err}); {REWRITE_HINT}"
            raise ChunkedGraphError(msg) from err
        return int(shape[1])

    @property
    def node_names(self) -> list[str]:
        return list(self.manifest["nodes"])

    def _load(self, chunk: dict[str, Any], axis: int = 0) -> np.ndarray:
        """Chunk `chunk` read into memory after its bytes matched the manifest's checksum (the
        array used is the one hashed: no window between check and use)."""
        path = self.root / chunk["file"]
        try:
            with open(path, "rb") as fh:
                version = np.lib.format.read_magic(fh)
                shape, fortran, dtype = _HEADER_READERS[version](fh)
                header_len = fh.tell()
                fh.seek(0)
                h = xxhash.xxh3_64(fh.read(header_len))
                arr = np.empty(shape, dtype, order="F" if fortran else "C")
                got = fh.readinto(memoryview(arr.reshape(-1, order="A")).cast("B"))
                tail = fh.read(1)
        except (OSError, ValueError, KeyError) as err:  # KeyError: an unknown .npy version
            raise ChunkedGraphError(f"{path}: unreadable ({err}); {REWRITE_HINT}") from err
        if got != arr.nbytes or tail:
            raise ChunkedGraphError(
                f"{path}: {header_len + got}{'+' if tail else ''} bytes, not the header + "
                f"{arr.nbytes} data bytes of {dtype} {shape} (truncated or replaced); "
                f"{REWRITE_HINT}"
            )
        h.update(memoryview(arr.reshape(-1, order="A")).cast("B"))
        if h.hexdigest() != chunk["xxh3"]:
            raise ChunkedGraphError(
                f"{path}: checksum mismatch with {self.root / MANIFEST} (corrupt or edited); "
                f"{REWRITE_HINT}"
            )
        if arr.ndim <= axis or arr.shape[axis] != chunk["count"]:
            raise ChunkedGraphError(
                f"{path}: shape {arr.shape} but the manifest counts {chunk['count']}; "
                f"{REWRITE_HINT}"
            )
        return arr

    def edge_chunks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(first edge id, src, dst) per chunk: verified, ids in [0, num_nodes), in memory."""
        start = 0
        for chunk in self.manifest["edges"]["chunks"]:
            arr = self._load(chunk, axis=1)
            if arr.ndim != 2 or arr.shape[0] != 2:
                raise ChunkedGraphError(
                    f"{self.root / chunk['file']}: shape {arr.shape}, expected (2, edges); "
                    f"{REWRITE_HINT}"
                )
            check_ids(arr, self.num_nodes, f"edge chunk {self.root / chunk['file']}")
            yield start, arr[0], arr[1]
            start += chunk["count"]

    def node_chunks(self, name: str) -> Iterator[tuple[int, np.ndarray]]:
        """(first node id, rows) per chunk of node array `name` (verified, in memory)."""
        if name not in self.manifest["nodes"]:
            raise ChunkedGraphError(f"{self.root}: no node array {name!r} ({self.node_names})")
        start = 0
        for chunk in self.manifest["nodes"][name]["chunks"]:
            yield start, self._load(chunk)
            start += chunk["count"]

    def node_array(self, name: str) -> np.ndarray | None:
        """The whole node array `name` in memory (for O(N) vectors: y, masks), None if absent."""
        if name not in self.manifest["nodes"]:
            return None
        return np.concatenate([rows for _, rows in self.node_chunks(name)])

    def gather_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` (sorted ascending) of node array `name`, one chunk in memory at a time."""
        out: np.ndarray | None = None
        for start, rows in self.node_chunks(name):
            if out is None:
                out = np.empty((len(ids), *rows.shape[1:]), dtype=rows.dtype)
            lo, hi = np.searchsorted(ids, [start, start + len(rows)])
            out[lo:hi] = rows[ids[lo:hi] - start]
        assert out is not None
        return out


class Buckets:
    """Append-only int64 spill files, one per node range `[b * width, (b + 1) * width)`."""

    def __init__(self, folder: Path, n: int, count: int) -> None:
        self.folder, self.count = folder, count
        self.width = -(-n // count)
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, b: int) -> Path:
        return self.folder / f"{b:05d}.bin"

    def spill(self, keys: np.ndarray, node: np.ndarray) -> None:
        """Append `keys` to the bucket of their `node` (the node whose range selects it)."""
        bucket = node // self.width
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.count + 1))
        for b in range(self.count):
            lo, hi = bounds[b], bounds[b + 1]
            if hi > lo:
                with full_disk_named(self.path(b)), open(self.path(b), "ab") as fh:
                    keys[order[lo:hi]].tofile(fh)

    def read(self, b: int) -> np.ndarray:
        path = self.path(b)
        return np.fromfile(path, dtype=np.int64) if path.exists() else np.empty(0, np.int64)

    def write(self, b: int, keys: np.ndarray) -> None:
        with full_disk_named(self.path(b)):
            keys.tofile(self.path(b))


def write_data(
    data: Any,
    root: str | os.PathLike,
    chunk_edges: int = CHUNK_EDGES,
    chunk_nodes: int = CHUNK_NODES,
) -> Path:
    """Convert a homogeneous in-memory `Data` to the chunked format (edge order is kept)."""
    if not hasattr(data, "edge_index") or hasattr(data, "node_types"):
        raise ConfigError(
            "partition.method=stream: only homogeneous graphs can be chunked; "
            "use partition=metis for heterogeneous datasets"
        )
    n = int(data.num_nodes)
    edge_index = data.edge_index.numpy()
    with ChunkedWriter(root, n, chunk_edges, chunk_nodes) as out:
        for lo in range(0, edge_index.shape[1], chunk_edges):
            out.add_edges(
                edge_index[0, lo : lo + chunk_edges], edge_index[1, lo : lo + chunk_edges]
            )
        for name in NODE_ARRAYS:
            value = getattr(data, name, None)
            if value is not None and value.dim() > 0 and value.size(0) == n:
                out.add_nodes(name, value.numpy())
        num_classes = getattr(data, "num_classes", None)
        return out.finish(num_classes=int(num_classes) if num_classes is not None else None)
