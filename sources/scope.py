"""Which source a URL belongs to.

A source *reaches* a URL under one of its seeds' directories (the seed
``https://corp.example.com/hr/`` reaches ``/hr/…``, the seed
``https://corp.example.com/`` the whole host) or, when it has allow patterns, a URL
one of them matches (the allow patterns then replace the seeds' directories).
Among the sources reaching a URL the most specific is the one with the longest
seed directory of it (an allow match breaks a tie, then the oldest source). The URL
belongs to it, unless it denies the URL: a URL its most specific source denies
belongs to no source but one whose allow pattern names it explicitly (anchored, with
a literal start longer than the denying source's seed directory, and which does not
deny it too). A URL no source reaches belongs to none; it is never handed to a
neighbour.

Precedence never crosses a group line. Among the sources reaching a URL, one
decides which compete for it: the source holding its page now, while it still
reaches it (so a page never moves to a source of other groups), else the most
specific. Only the sources managed as that one is (the same allowed groups)
compete, by the rules above; and a URL a source of other groups denies goes to
nobody new. So a source of another group takes neither a page another holds nor a
URL another denies. The admin refuses to save a source whose reach meets that of
a source of other groups (``overlapping_sources``); the rule holds for overlaps
saved before that check.

Every decision is made on the canonical URL (``kbsite.canonical``), the one the
page is stored under, so no other spelling of a URL (case, default port, dot
segments, percent-encoding) slips past a pattern or a seed directory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from kbsite.canonical import canonical_url_or_none
from kbsite.patterns import EVERYTHING, NOTHING, Pattern, stored_pattern
from sources.models import Page, Source

REPEATED_SLASHES = re.compile(r"(?<!:)//+")
ENCODED_SLASH = re.compile("%2f", re.IGNORECASE)


def seed_directory(seed: str) -> str | None:
    """The canonical site and directory of a seed: ``https://A.example/docs/x.html``
    gives ``https://a.example/docs/``, ``https://a.example/docs`` the whole site
    ``https://a.example/``. None for a seed that is not a URL with a host."""
    canonical = canonical_url_or_none(seed)
    if canonical is None:
        return None
    parts = urlsplit(canonical)
    directory = parts.path.rsplit("/", 1)[0] + "/"
    return f"{parts.scheme}://{parts.netloc}{directory}"


@dataclass(frozen=True)
class Scope:
    """One source's scope, compiled: its seed directories and patterns."""

    source_id: int
    directories: tuple[str, ...]
    allow: tuple[Pattern, ...]
    deny: tuple[Pattern, ...]
    # The ids of the groups that manage the source (its allowed groups; none:
    # every editor). Sources compete for a URL only with those managed alike.
    managers: frozenset[int] = frozenset()

    @classmethod
    def compile(
        cls,
        source_id: int,
        *,
        seeds: Iterable[str],
        allow: Iterable[str | Pattern],
        deny: Iterable[str | Pattern],
        managers: Iterable[int] = (),
    ) -> Scope:
        """Patterns given as text are compiled by RE2 as ``Source`` compiles its
        own: one RE2 cannot run allows nothing, or denies everything."""
        return cls(
            source_id=source_id,
            directories=tuple(d for d in map(seed_directory, seeds) if d),
            allow=tuple(_compiled(p, refused=NOTHING) for p in allow),
            deny=tuple(_compiled(p, refused=EVERYTHING) for p in deny),
            managers=frozenset(managers),
        )

    @classmethod
    def of(cls, source: Source) -> Scope:
        return cls.compile(
            source.pk,
            seeds=source.seeds,
            allow=source.allow_regexes,
            deny=source.deny_regexes,
            managers=source.manager_ids,
        )

    def allows(self, url: str) -> bool:
        return any(pattern.search(url) for pattern in self.allow)

    def reach(self, url: str) -> tuple[int, bool] | None:
        """How specifically this scope reaches the canonical ``url``, its deny
        patterns aside (greater is more specific), or None if it does not: (the
        length of its longest seed directory holding the URL, an allow match)."""
        held = max((len(d) for d in self.directories if url.startswith(d)), default=0)
        allowed = self.allows(url)
        reached = allowed if self.allow else held > 0
        return (held, allowed) if reached else None

    def names(self, url: str, *, beyond: int) -> bool:
        """Whether an allow pattern names the canonical ``url`` explicitly: it
        matches, it is anchored (``^``) and its literal start is longer than
        ``beyond`` (the seed directory of the source that denies the URL), so a
        pattern of a whole host never takes what a narrower source denied."""
        return any(
            pattern.search(url) and len(_literal_start(pattern)) > beyond
            for pattern in self.allow
        )

    def denies(self, url: str) -> bool:
        """Whether a deny pattern matches the canonical ``url`` or a spelling many
        servers read as the same path: runs of slashes made one (``/hr//private``),
        encoded slashes decoded with their dot segments resolved
        (``/hr/x%2F..%2Fprivate``)."""
        if not self.deny:
            return False
        spellings = _spellings(url)
        return any(p.search(s) for p in self.deny for s in spellings)


def _spellings(url: str) -> set[str]:
    decoded = ENCODED_SLASH.sub("/", url)
    resolved = canonical_url_or_none(decoded) or decoded
    return {
        url,
        REPEATED_SLASHES.sub("/", url),
        resolved,
        REPEATED_SLASHES.sub("/", resolved),
    }


def _compiled(pattern: str | Pattern, *, refused: Pattern) -> Pattern:
    if isinstance(pattern, str):
        return stored_pattern(pattern, refused=refused)
    return pattern


def _literal_start(pattern: Pattern) -> str:
    """The text an anchored pattern's every match starts with: ``^https://a\\.b/x/``
    gives ``https://a.b/x/``; an unanchored one gives nothing."""
    source = pattern.pattern
    if not source.startswith("^"):
        return ""
    literal = []
    i = 1
    while i < len(source):
        char = source[i]
        if char == "\\" and i + 1 < len(source) and not source[i + 1].isalnum():
            literal.append(source[i + 1])
            i += 2
        elif char in ".^$*+?{}[]|()\\":
            break
        else:
            literal.append(char)
            i += 1
    if i < len(source) and source[i] in "*?{":  # the last character is optional
        literal = literal[:-1]
    return "".join(literal)


def scope_owner(url: str, scopes: Sequence[Scope]) -> int | None:
    """The id of the source the URL belongs to (see the module's docstring), or
    None. ``scopes`` in the order of their sources' age, oldest first."""
    canonical = canonical_url_or_none(url)
    return None if canonical is None else _owner(canonical, scopes)


Ranked = list[tuple[tuple[int, bool], Scope]]


def _reaching(canonical: str, scopes: Sequence[Scope]) -> Ranked:
    """The scopes reaching the URL with their ranks, the oldest first."""
    ranked = ((scope.reach(canonical), scope) for scope in scopes)
    return [(rank, scope) for rank, scope in ranked if rank is not None]


def _denier(canonical: str, reaching: Ranked) -> Scope | None:
    """The most specific scope reaching the URL that denies it, if one does."""
    top = max(rank for rank, _ in reaching)
    return next(
        (s for rank, s in reaching if rank == top and s.denies(canonical)), None
    )


def _owner(
    canonical: str,
    scopes: Sequence[Scope],
    *,
    holder_of: Callable[[str], int | None] | None = None,
) -> int | None:
    """``holder_of``: the source holding a URL's page now, if it has one; asked
    only where sources of other groups meet (which the admin refuses to make)."""
    reaching = _reaching(canonical, scopes)
    if not reaching:
        return None
    contested = len({s.managers for _, s in reaching}) > 1
    held_by = holder_of(canonical) if contested and holder_of else None
    # Who decides: the page's present source while it still reaches the URL (a
    # page never crosses a group line), else the most specific source reaching
    # it. Only the sources managed as that one is compete, by the rules above.
    holder = next((s for _, s in reaching if s.source_id == held_by), None)
    top = max(rank for rank, _ in reaching)
    decider = holder or next(s for rank, s in reaching if rank == top)
    if holder is None and any(
        s.denies(canonical) for _, s in reaching if s.managers != decider.managers
    ):
        return None  # what one group's source denies, no other group takes
    reaching = [(r, s) for r, s in reaching if s.managers == decider.managers]
    top = max(rank for rank, _ in reaching)
    if _denier(canonical, reaching) is None:
        return next(scope.source_id for rank, scope in reaching if rank == top)
    # Denied where it belongs: only a source whose allow pattern names it.
    named = [
        (rank, scope)
        for rank, scope in reaching
        if scope.names(canonical, beyond=top[0]) and not scope.denies(canonical)
    ]
    if not named:
        return None
    best = max(rank for rank, _ in named)
    return next(scope.source_id for rank, scope in named if rank == best)


def _site(canonical: str) -> str:
    """``https://a.example/x`` gives ``https://a.example/``."""
    return canonical[: canonical.find("/", canonical.find("//") + 2) + 1]


class ScopeMap:
    """Every source's scope compiled once, for code that asks about many URLs (a
    crawler sorting the links of each page it fetches). A URL is judged only by
    the scopes that can reach it: those with a seed on its site, and those with
    allow patterns."""

    def __init__(self, sources: Iterable[Source] | None = None) -> None:
        chosen = Source.objects.with_manager_ids() if sources is None else sources
        self.sources = {source.pk: source for source in chosen}
        self.scopes = [Scope.of(self.sources[pk]) for pk in sorted(self.sources)]
        self.newest = max((s.updated_at for s in self.sources.values()), default=None)
        self._by_site: dict[str, list[Scope]] = {}
        self._holders: dict[str, int | None] = {}

    def _candidates(self, site: str) -> list[Scope]:
        if site not in self._by_site:
            self._by_site[site] = [
                scope
                for scope in self.scopes
                if scope.allow or any(d.startswith(site) for d in scope.directories)
            ]
        return self._by_site[site]

    def changed_since(self) -> bool:
        """Whether a source was added or saved after these scopes were read."""
        later = Source.objects.all()
        if self.newest is not None:
            later = later.filter(updated_at__gt=self.newest)
        return later.exists()

    def source_id_for(self, url: str) -> int | None:
        """The id of the source ``url`` belongs to, or None."""
        canonical = canonical_url_or_none(url)
        if canonical is None:
            return None
        scopes = self._candidates(_site(canonical))
        return _owner(canonical, scopes, holder_of=self._holder)

    def _holder(self, canonical: str) -> int | None:
        """The source holding the page at ``canonical``, one query per URL."""
        if canonical not in self._holders:
            held = Page.objects.filter(url=canonical).values_list(
                "source_id", flat=True
            )
            self._holders[canonical] = held.first()
        return self._holders[canonical]

    def denied_by(self, url: str) -> Source | None:
        """The most specific source reaching ``url`` if it denies it (and so no
        source may take it but one naming it), else None."""
        canonical = canonical_url_or_none(url)
        if canonical is None:
            return None
        reaching = _reaching(canonical, self._candidates(_site(canonical)))
        denier = _denier(canonical, reaching) if reaching else None
        return None if denier is None else self.sources[denier.source_id]

    def source_for(self, url: str) -> Source | None:
        owner = self.source_id_for(url)
        return None if owner is None else self.sources[owner]

    def belongs_to(self, source: Source, url: str) -> bool:
        return source.pk is not None and self.source_id_for(url) == source.pk


# Known pages of each other source tried against a source being saved.
PROBED_PAGES = 2_000


def overlapping_sources(scope: Scope, *, own_urls: Iterable[str] = ()) -> list[Source]:
    """The sources managed otherwise than ``scope`` (other allowed groups) whose
    reach meets its reach, so that one would take URLs the other covers: a seed
    directory inside the other's, an allow pattern naming the other's addresses,
    either reaching the other's known pages. ``scope.source_id`` is the source
    being saved (0 for a new one); ``own_urls`` its known pages."""
    mine = _probes(scope, own_urls)
    # A pattern with no anchored literal start may match any address of any site.
    anywhere = any(not _literal_start(pattern) for pattern in scope.allow)
    others = Source.objects.with_manager_ids().exclude(pk=scope.source_id)
    found = []
    for source in others:
        other = Scope.of(source)
        if other.managers == scope.managers:
            continue
        if anywhere:
            found.append(source)
            continue
        urls = source.pages.order_by("-last_verified_at").values_list("url", flat=True)[
            :PROBED_PAGES
        ]
        if any(other.reach(u) for u in mine) or any(
            scope.reach(u) for u in _probes(other, urls)
        ):
            found.append(source)
    return found


def _probes(scope: Scope, urls: Iterable[str]) -> list[str]:
    """Addresses standing for a scope's reach: its seed directories, the literal
    starts of its anchored allow and deny patterns (what it denies is its own to
    deny), and its known pages."""
    starts = [_literal_start(p) for p in (*scope.allow, *scope.deny)]
    return [*scope.directories, *filter(None, starts), *urls]


def source_for_url(url: str) -> Source | None:
    """The source ``url`` belongs to, or None."""
    return ScopeMap().source_for(url)
