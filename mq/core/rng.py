"""Seeded randomness, passed into the cores as an argument."""

from __future__ import annotations

import hashlib
import random


class Rng:
    """A seeded random source. ``fork(label)`` derives an independent stream, so adding
    a consumer of randomness in one place does not shift every other stream."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._random = random.Random(seed)

    def fork(self, *labels: object) -> "Rng":
        digest = hashlib.blake2b(repr((self.seed, labels)).encode(), digest_size=8).digest()
        return Rng(int.from_bytes(digest, "big"))

    def randint(self, low: int, high: int) -> int:
        return self._random.randint(low, high)

    def random(self) -> float:
        return self._random.random()

    def uniform(self, low: float, high: float) -> float:
        return self._random.uniform(low, high)

    def choice(self, items):  # type: ignore[no-untyped-def]
        return self._random.choice(items)

    def shuffle(self, items: list) -> None:
        self._random.shuffle(items)

    def randbytes(self, n: int) -> bytes:
        return self._random.randbytes(n)
