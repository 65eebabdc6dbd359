"""What every embedding backend is: texts in, unit vectors of a fixed size out.

Its ``space`` names backend, model and size together: vectors from different spaces
never mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    space: str
    dimensions: int
    max_input_tokens: int  # what one vector stands for; 0: no limit
    # Whether it embeds short texts by meaning on this machine, cheaply enough to
    # judge an answer's sentences with (retrieval.answer).
    reads_meaning: bool
    # Whether each request is paid for to a third party: the commit that records
    # its usage then waits for the disk (``retrieval.indexing``).
    billed: bool

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    # Questions readers ask, to be compared with what ``embed`` made of the
    # passages: a model trained on (query, passage) pairs (e5) embeds the two
    # sides differently; for the others it is ``embed``.
    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]: ...

    def token_starts(self, text: str) -> list[int]: ...


# A mark at the end of the model part of a space's name, for the setting that
# makes the backend's model give other vectors of the same texts: questions and
# passages sent as such (openai, EMBEDDING_INPUT_TYPES); weights in 8 bits (local,
# EMBEDDING_LOCAL_INT8). A space's name is all it takes to build its embedder.
MARKS = {"openai": "+input_type", "local": "+int8"}


def model_marked(backend: str, model: str, marked: bool) -> str:
    """The model part of a space's name: the model, with the backend's mark if
    ``marked``."""
    return model + MARKS[backend] if marked else model


def model_unmarked(backend: str, model: str) -> tuple[str, bool]:
    """The model a space's model part names, and whether it bears the mark."""
    mark = MARKS.get(backend)
    if mark and model.endswith(mark):
        return model[: -len(mark)], True
    return model, False


def space_name(
    backend: str, model: str, dimensions: int, max_input_tokens: int = 0
) -> str:
    """backend/model/dimensions; a window size chosen by the operator (not the
    model's own) is part of the name, as it makes other vectors."""
    name = f"{backend}/{model}/{dimensions}"
    return f"{name}/w{max_input_tokens}" if max_input_tokens else name


def space_parts(name: str) -> tuple[str, str, int, int]:
    """Backend, model, dimensions and chosen window of a space name (a model name
    may itself hold slashes)."""
    backend, rest = name.split("/", 1)
    model, *tail = rest.rsplit("/", 2)
    if len(tail) == 2 and tail[1].startswith("w") and tail[1][1:].isdigit():
        return backend, model, int(tail[0]), int(tail[1][1:])
    model, dimensions = rest.rsplit("/", 1)
    return backend, model, int(dimensions), 0


def vectors_checked(vectors: list[list[float]], count: int, embedder: Embedder) -> list:
    """The vectors, if there is one per text and each has the configured size."""
    sizes = {len(vector) for vector in vectors}
    if len(vectors) != count or sizes - {embedder.dimensions}:
        raise ValueError(
            f"{embedder.space}: got {len(vectors)} vectors of sizes {sorted(sizes)} "
            f"for {count} texts; EMBEDDING_DIMENSIONS is {embedder.dimensions}"
        )
    return vectors
