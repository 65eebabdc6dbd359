"""Near-duplicate signatures: similar texts share a band, different ones do not."""

from __future__ import annotations

from ingest.reading import similarity

BASE = " ".join(
    f"The scheduler runs job number {n} when its queue has room." for n in range(80)
)


def test_texts_differing_by_a_version_string_are_near_duplicates():
    a = similarity.signature(BASE + " Release 4.1.")
    b = similarity.signature(BASE + " Release 4.2.")

    assert similarity.similarity(a, b) >= similarity.THRESHOLD
    assert set(similarity.bands(a)) & set(similarity.bands(b))


def test_unrelated_texts_are_not():
    other = " ".join(
        f"Backups are copied to bucket {n} every night." for n in range(80)
    )
    a, b = similarity.signature(BASE), similarity.signature(other)

    assert similarity.similarity(a, b) < 0.2
    assert not set(similarity.bands(a)) & set(similarity.bands(b))


def test_signatures_are_stable_and_short_texts_work():
    assert similarity.signature("one two") == similarity.signature("One two")
    count, rows = similarity.bands_layout()
    assert len(similarity.bands(similarity.signature(""))) == count
    assert count * rows <= similarity.PERMUTATIONS
