"""The map of the code: each module of the site package is either shared by the apps
(checked to import none of them) or the project's wiring (checked to be imported by
none of them), so that a new module cannot slip past both import contracts."""

from __future__ import annotations

import pkgutil
import tomllib

import kbsite
from tests.conftest import ROOT

APPS = {"sources", "ingest", "retrieval"}


def forbidden_contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return [c for c in contracts if c["type"] == "forbidden"]


def test_every_site_module_is_shared_or_wiring_and_none_is_both():
    contracts = forbidden_contracts()
    shared = {  # they may not import the apps
        module
        for c in contracts
        if set(c["forbidden_modules"]) == APPS
        for module in c["source_modules"]
    }
    wiring = {  # the apps may not import them
        module
        for c in contracts
        if set(c["source_modules"]) == APPS
        for module in c["forbidden_modules"]
    }
    modules = {f"kbsite.{m.name}" for m in pkgutil.iter_modules(kbsite.__path__)}

    assert not shared & wiring
    assert sorted(modules - shared - wiring) == [], "in neither contract"
    assert sorted((shared | wiring) - modules) == [], "no such module"
