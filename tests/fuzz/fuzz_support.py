"""The fuzzing engine: seed inputs, mutations, and the one assertion.

Hypothesis draws the shape of each batch of inputs (which seeds, which mutation
operators, a seed for the positions); a seeded ``random.Random`` then expands it into
``INPUTS_PER_EXAMPLE`` concrete inputs. Hypothesis' own per-example overhead (~0.5 ms
here) would otherwise cap a CI run at a few thousand inputs per target; expanded this
way each target sees ``MQ_FUZZ_EXAMPLES`` inputs (100,000 by default) in seconds.
Everything is derandomized: a failure prints the input, which replays it.
"""

from __future__ import annotations

import os
import random
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mq.protocol.errors import ProtocolError

FUZZ_INPUTS = int(os.environ.get("MQ_FUZZ_EXAMPLES", "100000"))
"""Inputs per target (TESTING.md: 100k per target in CI)."""
INPUTS_PER_EXAMPLE = 100

INTERESTING_BYTES = [
    0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xCA,
    0xCB, 0xCC, 0xCF, 0xD3, 0xD4, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0x90, 0x9F,
    0x8F, 0xA0, 0xBF, 0xE0,
]
INTERESTING_U32 = [
    0, 1, 3, 4, 5, 8, 48, 49, 61, 255, 256, 65535, 65536, 1 << 20, 0x7FFFFFFF, 0x80000000,
    0xFFFFFFFE, 0xFFFFFFFF,
]
OPERATORS = ["flip", "byte", "u32", "truncate", "insert", "delete", "duplicate", "splice", "random"]


CORPUS_DIR = Path(__file__).with_name("corpus")


def load_corpus(target: str) -> list[bytes]:
    """Inputs kept for ``target`` in ``corpus/<target>.hex``: one hex string a line,
    ``#`` comments. Past failures and hand-made nasties go there."""
    path = CORPUS_DIR / f"{target}.hex"
    if not path.exists():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [bytes.fromhex(line) for line in lines if line]


def mutate(data: bytes, rng: random.Random, ops: Sequence[str], seeds: Sequence[bytes]) -> bytes:
    buf = bytearray(data)
    for op in ops:
        n = len(buf)
        if op == "random" or not n:
            buf = bytearray(rng.randbytes(rng.randrange(0, 80)))
        elif op == "flip":
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == "byte":
            buf[rng.randrange(n)] = rng.choice(INTERESTING_BYTES)
        elif op == "u32":  # a length or count that lies
            pos = rng.randrange(n)
            buf[pos : pos + 4] = struct.pack(">I", rng.choice(INTERESTING_U32))
        elif op == "truncate":
            del buf[rng.randrange(n + 1) :]
        elif op == "insert":
            pos = rng.randrange(n + 1)
            buf[pos:pos] = rng.randbytes(rng.randrange(1, 9))
        elif op == "delete":
            pos = rng.randrange(n)
            del buf[pos : pos + rng.randrange(1, 9)]
        elif op == "duplicate":
            pos = rng.randrange(n)
            piece = buf[pos : pos + rng.randrange(1, 17)]
            where = rng.randrange(n + 1)
            buf[where:where] = piece
        elif op == "splice":
            other = rng.choice(seeds)
            cut = rng.randrange(n + 1)
            buf = buf[:cut] + other[rng.randrange(len(other) + 1) :]
    return bytes(buf)


def fuzz(
    seeds: Sequence[bytes],
    target: Callable[[bytes, random.Random], None],
    *,
    inputs: int = FUZZ_INPUTS,
    operators: Sequence[str] = OPERATORS,
    structured: Callable[[bytes, random.Random], bytes] | None = None,
) -> Counter[str]:
    """Run ``target`` on ``inputs`` mutated seeds; only ProtocolError may escape it.
    Returns how the inputs ended: ``"ok"`` or the error code's name, and ``"total"``
    (so a test can check the bar was met and that the fuzzer got past the door).
    ``structured(seed, rng)``, when given, makes a third of the inputs by mutating the
    decoded structure of a seed (see ``tree_mutate``) instead of its bytes."""
    assert seeds, "a fuzz target needs seeds"
    examples = max(1, inputs // INPUTS_PER_EXAMPLE)
    outcomes: Counter[str] = Counter()

    def attempt(data: bytes, rng: random.Random) -> None:
        outcomes["total"] += 1
        try:
            target(data, rng)
            outcomes["ok"] += 1
        except ProtocolError as exc:
            outcomes[exc.code.name] += 1
        except Exception as exc:  # the bug this fuzzer exists to find
            raise AssertionError(
                f"{type(exc).__name__} escaped on input {data.hex()} (add it to the "
                f"target's file in tests/fuzz/corpus/): {exc}"
            ) from exc

    for seed in seeds:  # every seed, and so every corpus entry, runs as it is
        attempt(seed, random.Random(0))

    @settings(
        max_examples=examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.integers(0, 2**32 - 1),
        st.lists(st.sampled_from(list(operators)), min_size=0, max_size=4),
    )
    def run(seed: int, ops: list[str]) -> None:
        rng = random.Random(seed)
        for _ in range(INPUTS_PER_EXAMPLE):
            base = seeds[rng.randrange(len(seeds))]
            picked = ops or [rng.choice(operators) for _ in range(rng.randrange(1, 4))]
            roll = rng.random()
            data = base
            if structured is not None and roll < 0.33:
                try:
                    data = structured(base, rng)
                except ProtocolError:  # a corpus entry that does not decode: mutate bytes
                    data = mutate(base, rng, picked, seeds)
            elif roll < 0.97:
                data = mutate(base, rng, picked, seeds)
            attempt(data, rng)

    run()
    return outcomes


TREE_VALUES: list[object] = [
    None, True, False, 0, 1, -1, 2**31, 2**63 - 1, 2**64 - 1, -(2**63), 1.5, "", "x", "\u00e9",
    b"", b"x", [], {}, [0, 0], [0, 2**32], [-1, 1], [[]], {"x": 1}, {"": None}, [0] * 5,
]


def tree_mutate(obj: object, rng: random.Random) -> object:
    """Replace, delete or add one node somewhere in a decoded msgpack value: type
    confusion that byte mutations rarely produce in well-formed msgpack."""
    if not isinstance(obj, (list, dict)) or not obj or rng.random() < 0.15:
        return rng.choice(TREE_VALUES)
    if isinstance(obj, list):
        copy = list(obj)
        i = rng.randrange(len(copy))
        roll = rng.random()
        if roll < 0.1:
            del copy[i]
        elif roll < 0.2:
            copy.insert(i, rng.choice(TREE_VALUES))
        else:
            copy[i] = tree_mutate(copy[i], rng)
        return copy
    copy_map = dict(obj)
    key = rng.choice(sorted(copy_map, key=repr))
    roll = rng.random()
    if roll < 0.1:
        del copy_map[key]
    elif roll < 0.2:
        copy_map[rng.choice(["extra", "name", "partition", "records", "topics"])] = rng.choice(
            TREE_VALUES)
    else:
        copy_map[key] = tree_mutate(copy_map[key], rng)
    return copy_map
