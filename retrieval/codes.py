"""Sign codes of vectors: a cheap first pass for a search of part of the index.

A search restricted to a tenth of the index (a source filter, a reader who may
read one source) is the costliest case for both of the database's plans: the
HNSW graph walk visits about ten vectors for each one that passes the filter,
and the exact read fetches every searched chunk's vector by its hash. Each chunk
row therefore carries a code of its text's vector in the serving space: the
signs of its projections on CODE_BITS random directions (SimHash), 128 bytes.
The number of signs two codes differ in estimates the angle between their
vectors, so ranking the searched chunk rows by that count, which reads nothing
but those rows, and then reading exactly the vectors of the best thousand or so
finds the nearest vectors of a tenth of the index in half the time of either
plan (``retrieval.sql.nearest_statement``; docs/benchmarks.md). Like the walk,
it is approximate: a vector whose code ranks below the cut is not found.

Random directions, not the vector's own signs: a ``hashing`` vector is mostly
zeros, and a model's vectors lie in a narrow cone, so their own signs say
little; the projections' signs estimate the angle for any vector.

The code is a text's, written with its vectors on its first window's row in
each space (``Embedding.code``); a text read in several windows is coded by the
mean direction of its windows, and the exact pass then ranks it by its nearest
window. A chunk row copies the code of the serving space as it is written, and
records which space that is (``Chunk.code_space``). A chunk whose code is
missing or of another space (after a switch, or of a text embedded before codes
were) is read exactly instead, until ``retrieval.indexing.codes_fill`` codes it:
a code missing or out of date slows a search down and never hides a chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

# Signs per code. At 100,000 chunks of hashed vectors and a tenth of them
# searched, the best 1,000 by 1,024 signs held 0.997 of the exact nearest 10
# (512 signs: 0.972); docs/benchmarks.md.
CODE_BITS = 1024
# The random directions are fixed for good: a stored code is compared with the
# code of a question made years later. NumPy keeps RandomState's stream the same
# across releases (its compatibility policy), unlike the newer Generator's.
_SEED = 20261207


@cache
def _directions(dimensions: int) -> np.ndarray:
    return (
        np.random.RandomState(_SEED)
        .standard_normal((CODE_BITS, dimensions))
        .astype(np.float32)
    )


def directions_ready(dimensions: int) -> None:
    """Draw the directions for vectors of this size now (40 ms for 384, 187 ms
    for 3,072 here), not in a first question's search."""
    _directions(dimensions)


def vector_code(vector: Sequence[float]) -> str:
    """The code of one vector, as PostgreSQL writes a ``bit`` string."""
    return text_code([vector])


def text_code(windows: Sequence[Sequence[float]]) -> str:
    """The code of a text from its windows' vectors: that of their mean direction
    (each window's unit vector counts the same).

    One text at a time: coding a request's texts as one product with the
    directions made two workers' first crawl 20 pages/s against 38 one text at
    a time (``bench.recrawl``), likely as the numerical library's own threads
    competed with the other worker and the database (not traced)."""
    matrix = np.asarray(windows, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    mean = (matrix / np.where(norms == 0, 1, norms)).sum(axis=0)
    signs = _directions(matrix.shape[1]) @ mean > 0
    return (signs.astype(np.uint8) + ord("0")).tobytes().decode("ascii")
