"""``meta.properties``: which cluster and node a data directory belongs to (Kafka's file).

Written once, when the directory is first used::

    version=1
    cluster.id=<32 hex digits>
    node.id=<n>

A broker refuses a directory written by another ``node.id`` (two brokers sharing a
directory would corrupt each other). Per-partition checkpoints (recovery point, log
start offset) are the storage layer's, in each partition directory. The file is
replaced atomically: written to ``meta.properties.tmp``, fsynced, renamed.
"""

from __future__ import annotations

import os.path

from mq.core.errors import ErrorCode, MqError
from mq.core.rng import Rng
from mq.storage.fileio import FileIO

META_FILE = "meta.properties"


class MetaProperties:
    def __init__(self, fileio: FileIO, data_dir: str) -> None:
        self.fileio = fileio
        self.data_dir = data_dir

    def _path(self, name: str) -> str:
        return os.path.join(self.data_dir, name)

    def _read(self, name: str) -> str | None:
        path = self._path(name)
        if not self.fileio.exists(path):
            return None
        handle = self.fileio.open(path)
        try:
            return handle.pread(0, handle.size()).decode("utf-8", errors="replace")
        finally:
            handle.close()

    def _write(self, name: str, text: str) -> None:
        tmp = self._path(name + ".tmp")
        if self.fileio.exists(tmp):
            self.fileio.remove(tmp)
        handle = self.fileio.open(tmp)
        try:
            handle.append(text.encode("utf-8"))
            handle.fsync()
        finally:
            handle.close()
        self.fileio.rename(tmp, self._path(name))

    def load_or_create(self, node_id: int, rng: Rng) -> str:
        """The cluster id; refuses a data directory that belongs to another node id."""
        text = self._read(META_FILE)
        if text is not None:
            props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
            if props.get("node.id") != str(node_id):
                raise MqError(ErrorCode.INVALID_CONFIG,
                              f"{self._path(META_FILE)} belongs to node.id={props.get('node.id')}, not {node_id}")
            return props.get("cluster.id", "")
        cluster_id = rng.randbytes(16).hex()
        self._write(META_FILE, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
        return cluster_id
