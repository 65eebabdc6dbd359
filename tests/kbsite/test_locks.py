"""Every advisory lock is an entry of one registry (``kbsite.locks``), no two share
a number, no other module writes a lock statement, and each entry is the lock the
releases before the registry took, so that an old node and a new one still
exclude each other during an upgrade."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from ingest.delivery.claim import deliveries_held
from kbsite import locks
from tests.conftest import ROOT

SCANNED = ("kbsite", "sources", "ingest", "retrieval", "bench")
LOCK_STATEMENT = re.compile(
    r"pg_(try_)?advisory_\w*|locktype\s*=\s*'advisory'", re.IGNORECASE
)


def lock_statements(source: str) -> list[int]:
    """The lines of ``source`` that name an advisory lock function, or read the
    advisory locks of ``pg_locks``."""
    return [
        number
        for number, line in enumerate(source.splitlines(), start=1)
        if LOCK_STATEMENT.search(line)
    ]


def lock_statements_outside_the_registry() -> list[str]:
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "kbsite" / "locks.py" or "data" in path.parts:
                continue
            lines = lock_statements(path.read_text())
            found += [f"{path.relative_to(ROOT)}:{n}" for n in lines]
    return found


def test_no_module_but_the_registry_writes_a_lock_statement():
    assert lock_statements_outside_the_registry() == []


@pytest.mark.parametrize(
    "line",
    [
        'cursor.execute("SELECT pg_advisory_lock(%s)", [key])',
        'cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [1, 2])',
        'Func(Value(1), function="pg_try_advisory_lock", output_field=b)',
        'SQL("SELECT {}(%s)").format(Identifier("pg_advisory_unlock_all"))',
        "\"SELECT objid FROM pg_locks WHERE locktype = 'advisory'\"",
        "cursor.execute('SELECT PG_ADVISORY_XACT_LOCK_SHARED(1)')",
        "# pg_try_advisory_lock(space, key) space of delivery runs",
    ],
)
def test_the_scan_finds_each_spelling_of_a_lock_statement(line):
    assert lock_statements(f"x = 1\n{line}\n") == [2]


def test_the_scan_leaves_prose_and_row_locks_alone():
    source = (
        "# A run holds an advisory lock of its session.\n"
        "Page.objects.select_for_update().get(pk=1)\n"
        'cursor.execute("SELECT * FROM pg_locks WHERE granted")\n'
    )
    assert lock_statements(source) == []


def test_no_two_entries_share_a_name_or_a_number():
    numbers = [lock.number for lock in locks.REGISTRY]
    names = [lock.name for lock in locks.REGISTRY]

    assert len(set(numbers)) == len(numbers)
    assert len(set(names)) == len(names)


def test_each_number_fits_its_kind():
    for lock in locks.REGISTRY:
        bits = 32 if lock.space else 64
        assert -(2 ** (bits - 1)) <= lock.number < 2 ** (bits - 1), lock.name


def test_every_lock_of_the_module_is_in_the_registry():
    defined = [v for v in vars(locks).values() if isinstance(v, locks.AdvisoryLock)]

    assert sorted(defined, key=id) == sorted(locks.REGISTRY, key=id)


@contextmanager
def held_elsewhere(statement: str, args: list[int]) -> Iterator[None]:
    """A lock held by another database session, taken with the statement and the
    number the releases before the registry ran, as a node not yet upgraded
    holds it."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(statement, args)
            yield
            # Let go before closing: a closed session's backend ends a moment later.
            cursor.execute("SELECT pg_advisory_unlock_all()")
    finally:
        other.close()


ONE = "SELECT pg_advisory_lock(%s)"
TWO = "SELECT pg_advisory_lock(%s, %s)"
SESSION, XACT = "session", "transaction"
# Each lock as the releases before the registry spelled it (the module, its
# number), and the entry (and key) that takes it now, as a lock of its kind.
OLD_AND_NEW = [
    ("ingest.pushing.services.SENDER_LOCK", ONE, [0x6B62_7075],
     locks.PUSH_SENDER, None, SESSION),
    ("ingest.planning.recrawl.PLANNER_LOCK", ONE, [0x6B62_706C],
     locks.RECRAWL_PLANNER, None, XACT),
    ("retrieval.statistics.LOCK_KEY", ONE, [0x6B625F6C6578],
     locks.WORD_COUNTS, None, XACT),
    ("retrieval.indexing.PRUNE_LOCK", ONE, [0x6B625F7072756E],
     locks.VECTOR_PRUNE, None, XACT),
    ("ingest.delivery.claim.LOCK_SPACE", TWO, [0x6B62_646C, 12],
     locks.DELIVERY_RUNS, 12, SESSION),
    ("ingest.delivery.claim.LOCK_SPACE, past 2^31", TWO, [0x6B62_646C, -(2**31) + 5],
     locks.DELIVERY_RUNS, 2**31 + 5, SESSION),
    ("ingest.notify.slots.LOCK_SPACE", TWO, [0x6B62_6E74, 0],
     locks.NOTIFY_SENDERS, 0, SESSION),
    ("sources.replan.PLAN_LOCK_SPACE", TWO, [0x6B62_6470, 3],
     locks.DAY_PLANS, 3, XACT),
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(
    "statement, args, lock, key, kind",
    [row[1:] for row in OLD_AND_NEW],
    ids=[row[0] for row in OLD_AND_NEW],
)
def test_a_lock_an_older_node_holds_is_refused_to_this_one(
    statement, args, lock, key, kind
):
    take = locks.session_lock_try if kind == SESSION else locks.xact_lock_try
    with held_elsewhere(statement, args):
        assert take(lock=lock, key=key) is False

    assert take(lock=lock, key=key) is True
    if kind == SESSION:
        assert locks.session_lock_release(lock=lock, key=key) is True


@pytest.mark.django_db
def test_the_keys_held_of_a_space_are_read_as_they_were_taken():
    space = locks.DELIVERY_RUNS.number
    with held_elsewhere(TWO, [space, 7]), held_elsewhere(TWO, [space, -3]):
        held = locks.keys_held(lock=locks.DELIVERY_RUNS)
        others = locks.keys_held(lock=locks.NOTIFY_SENDERS)
        runs = deliveries_held([7, 8, 2**32 - 3, 2**32 + 7])

    assert held == {7, -3}  # -3: the delivery 2^32 - 3's key, as an int4
    assert others == set()
    assert runs == {7, 2**32 - 3, 2**32 + 7}


@pytest.mark.django_db
def test_several_keys_are_taken_at_once_but_those_held_elsewhere():
    space = locks.DELIVERY_RUNS.number
    keys = [7, 8, 2**31 + 5, 2**32 + 9, 9]
    with held_elsewhere(TWO, [space, 7]), held_elsewhere(TWO, [space, -(2**31) + 5]):
        taken = locks.session_locks_try(lock=locks.DELIVERY_RUNS, keys=keys)
        # 9 and 2^32 + 9 share a lock: this session holds it, for both.
        assert taken == {8, 2**32 + 9, 9}
        assert locks.keys_held(lock=locks.DELIVERY_RUNS) == {7, -(2**31) + 5, 8, 9}

        locks.session_locks_release(lock=locks.DELIVERY_RUNS, keys=taken)
        assert locks.keys_held(lock=locks.DELIVERY_RUNS) == {7, -(2**31) + 5}
    assert locks.session_locks_try(lock=locks.DELIVERY_RUNS, keys=[]) == set()


@pytest.mark.django_db
def test_keys_sharing_a_lock_let_go_of_it_once():
    # This session holds 9 on its own account (a run's own delivery), then
    # takes 9 and 2^32 + 9 with others: one more hold, let go of once.
    assert locks.session_lock_try(lock=locks.DELIVERY_RUNS, key=9)
    taken = locks.session_locks_try(lock=locks.DELIVERY_RUNS, keys=[9, 2**32 + 9])
    assert taken == {9, 2**32 + 9}

    locks.session_locks_release(lock=locks.DELIVERY_RUNS, keys=taken)

    assert locks.keys_held(lock=locks.DELIVERY_RUNS) == {9}, "its own hold stays"
    assert locks.session_lock_release(lock=locks.DELIVERY_RUNS, key=9)


@pytest.mark.parametrize(
    "call",
    [
        lambda: locks.session_lock_try(lock=locks.DELIVERY_RUNS),
        lambda: locks.session_locks_try(lock=locks.PUSH_SENDER, keys=[1]),
        lambda: locks.session_lock_release(lock=locks.PUSH_SENDER, key=1),
        lambda: locks.xact_lock_wait(lock=locks.DAY_PLANS),
        lambda: locks.keys_held(lock=locks.WORD_COUNTS),
    ],
    ids=[
        "a space without a key",
        "keys of a key, taken",
        "a key with a key",
        "a wait",
        "keys of a key",
    ],
)
def test_a_space_wants_a_key_and_a_key_none(call):
    with pytest.raises(TypeError):
        call()
