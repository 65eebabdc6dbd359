"""Hand-written SQL gets its names from the models, and each app's from the modules
that own it.

Where a measured hot path runs SQL written by hand, one module per app (per feature
package of ``ingest``) composes it (``ingest.delivery.sql``, ``ingest.crawl.sql``,
``ingest.pushing.sql``, ``sources.sql``, ``retrieval.sql``; the rule of who sees which
source has its own, ``sources.access``, and advisory locks are taken by
``kbsite.locks`` alone, tests/kbsite/test_locks.py) with ``psycopg.sql``, names
taken from the models' ``_meta`` and quoted, values passed as parameters. A table
or column put into the text by an f-string, ``%`` or ``str.format`` is not quoted
and goes stale silently when the model's table is renamed: the scan below finds
each statement built so, by reading the source of every module of the apps.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.conftest import ROOT

APPS = ("kbsite", "sources", "ingest", "retrieval")
# Calls that run, or hand to the ORM, the SQL text of their first argument.
RUNS_SQL = {"execute", "executemany", "raw", "RawSQL"}
# Apps whose every statement run by hand is run by one of these modules: the app's
# (or its feature packages') sql modules, and the rule of who sees which source
# (a rule, not a SQL helper).
OWNERS = {
    "ingest": {"ingest.delivery.sql", "ingest.crawl.sql", "ingest.pushing.sql"},
    "sources": {"sources.sql", "sources.access"},
    "retrieval": {"retrieval.sql"},
}

Names = Callable[[str], list[ast.expr]]


def modules(root: Path) -> Iterator[tuple[str, ast.Module]]:
    """Each module of the apps under ``root`` but their migrations, parsed."""
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            yield name, ast.parse(path.read_text(), filename=str(path))


def sql_runs(tree: ast.Module) -> Iterator[tuple[ast.Call, ast.expr, Names]]:
    """Each call that runs SQL, its SQL argument, and what each name of the
    enclosing function (or else of the module) is assigned."""
    for scope in [tree, *_functions(tree)]:
        for node in _own_nodes(scope):
            if isinstance(node, ast.Call) and _runs_sql(node) and node.args:
                yield node, node.args[0], _assignments(scope, tree)


def _functions(tree: ast.Module) -> list[ast.AST]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    return [node for node in ast.walk(tree) if isinstance(node, kinds)]


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions defined in it: each call is
    seen once, in its innermost function."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield child
        yield from _own_nodes(child)


def _runs_sql(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in RUNS_SQL


def _assignments(scope: ast.AST, tree: ast.Module) -> Names:
    def assigned(name: str) -> list[ast.expr]:
        values = _assigned_in(scope, name)
        return values if values or scope is tree else _assigned_in(tree, name)

    return assigned


def _assigned_in(scope: ast.AST, name: str) -> list[ast.expr]:
    values = []
    for node in _own_nodes(scope):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            values.append(node.value)
    return values


def formatted(node: ast.expr, names: Names, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``node`` is SQL text with something put in by string formatting
    (an f-string, ``%``, ``str.format``, ``+``), other than a number."""
    if isinstance(node, ast.JoinedStr):
        return any(
            isinstance(part, ast.FormattedValue) and not _number(part.value)
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _text(node.left) and not _numbers(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = node.left, node.right
        built = _text(left) != _text(right)  # text and something else
        return built or formatted(left, names, seen) or formatted(right, names, seen)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and _text(node.func.value)
    if isinstance(node, ast.Name) and node.id not in seen:
        inner = seen | {node.id}
        return any(formatted(value, names, inner) for value in names(node.id))
    return False


def _text(node: ast.expr) -> bool:
    constant = isinstance(node, ast.Constant) and isinstance(node.value, str)
    return constant or isinstance(node, ast.JoinedStr)


def _number(node: ast.expr) -> bool:
    """A number whatever it holds: it cannot bring a name into the statement."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float)
    func = getattr(node, "func", None)
    return isinstance(func, ast.Name) and func.id in {"int", "float"}


def _numbers(node: ast.expr) -> bool:
    if isinstance(node, ast.Tuple):
        return all(_number(item) for item in node.elts)
    return _number(node)


def sql_formatted(root: Path) -> list[str]:
    """Where SQL run by the apps under ``root`` is built by string formatting."""
    found = []
    for module, tree in modules(root):
        for call, statement, names in sql_runs(tree):
            if formatted(statement, names):
                found.append(f"{module}:{call.lineno}")
    return found


def sql_run_outside_owners(root: Path) -> list[str]:
    """Where an app of OWNERS runs SQL of its own outside its owning modules."""
    found = []
    for module, tree in modules(root):
        app = module.partition(".")[0]
        if app not in OWNERS or module in OWNERS[app]:
            continue
        for call, _, _ in sql_runs(tree):
            if isinstance(call.func, ast.Attribute):  # RawSQL only wraps a SELECT
                found.append(f"{module}:{call.lineno}")
    return found


def test_no_statement_of_the_apps_is_built_by_string_formatting():
    assert sql_formatted(ROOT) == []


def test_each_app_runs_its_sql_only_from_its_owning_modules():
    assert sql_run_outside_owners(ROOT) == []


def _scanned(source: str) -> list[int]:
    tree = ast.parse(source)
    return sorted(
        call.lineno
        for call, statement, names in sql_runs(tree)
        if formatted(statement, names)
    )


def test_the_scan_finds_names_put_in_by_string_formatting():
    source = """
def retime(cursor, ids, due):
    cursor.execute(
        f"UPDATE {Page._meta.db_table} p SET next_crawl_at = v.due "
        "FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(id, due) "
        "WHERE p.id = v.id",
        [ids, due],
    )
def lock(cursor, take):
    function = "pg_try_advisory_lock" if take else "pg_advisory_unlock"
    cursor.execute(f"SELECT {function}(%s)", [1])
def ordered(cursor, statement, params):
    cursor.execute(f"{statement} ORDER BY 1", params)
def built(cursor, table):
    statement = "DELETE FROM %s" % table
    cursor.execute(statement)
    cursor.execute("SELECT * FROM {}".format(table))
    cursor.execute("TRUNCATE " + table)
    Model.objects.raw(f"SELECT * FROM {table}")
    Model.objects.filter(pk__in=RawSQL(f"SELECT id FROM {table}", []))
"""
    assert _scanned(source) == [3, 11, 13, 16, 17, 18, 19, 20]


def test_the_scan_leaves_composed_statements_and_numbers_alone():
    source = """
STATEMENT = SQL("SELECT {} FROM {}").format(column(Page, "url"), table(Page))
TEXT = STATEMENT.as_string()
def run(cursor, connection):
    cursor.execute(TEXT, [1])
    cursor.execute(STATEMENT.as_string(cursor.connection))
    cursor.execute("SELECT pg_try_advisory_lock(%s)", [1])
    cursor.execute(f"SET hnsw.ef_search = {int(EF_SEARCH)}; " "SET x = y")
    cursor.execute(SQL("ALTER TABLE {} SET UNLOGGED").format(Identifier(name)))
    statement = "SELECT 1 " + "FROM t"
    cursor.execute(statement)
    server.execute()
"""
    assert _scanned(source) == []
