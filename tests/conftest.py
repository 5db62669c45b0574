"""Shared fixtures: which GRPO module is under test, and bounded hypothesis settings.

`--impl` picks the module every `impl` test runs against:
  fixed (default)  grpo_fixed: everything must pass (this is what `make test` runs)
  buggy            grpo_buggy: the catalog tests (tests/test_catalog.py) must all fail
  B1 .. B11        workbook.catalog.hybrid("Bn"): grpo_fixed with that one bug switched back on
e.g. `.venv/bin/pytest tests/test_catalog.py --impl=buggy` lists every bug the catalog catches.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

import workbook  # noqa: F401  (sets torch to one thread: faster for these tiny models)
from workbook import catalog

IMPL_CHOICES = ["fixed", "buggy", *catalog.BUG_IDS]

# Bounded, reproducible property tests: no deadline (the machine is shared: no timed assertions),
# derandomized so a failure reproduces, no example database written into the repository.
settings.register_profile(
    "workbook",
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("workbook")


def pytest_configure(config):
    config.addinivalue_line("markers", "spec(*keys): the SPEC.md sentences a test checks (interview/spec.py)")


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        default="fixed",
        choices=IMPL_CHOICES,
        help="module under test for `impl` tests: fixed (default), buggy, or a single-bug hybrid B1..B11",
    )


def load_impl(name: str):
    """The module called `name` in --impl: grpo_fixed, grpo_buggy, or a single-bug hybrid of grpo_fixed."""
    if name == "fixed":
        import grpo_fixed

        return grpo_fixed
    if name == "buggy":
        import grpo_buggy

        return grpo_buggy
    return catalog.hybrid(name)  # (hybrids log health warnings, but only from train(), which impl tests avoid)


@pytest.fixture(scope="session")
def impl(request):
    """The module under test (see --impl). Session scope, so hypothesis tests can use it."""
    return load_impl(request.config.getoption("--impl"))
