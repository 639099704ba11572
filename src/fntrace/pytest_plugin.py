"""pytest --fntrace: one trace per test.  Inert unless --fntrace is given."""
from __future__ import annotations


def pytest_addoption(parser) -> None:
    pass
