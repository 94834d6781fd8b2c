"""Tests that need a system tool (chromium, bubblewrap, JupyterHub's proxy, playwright).

On a learner's machine a missing tool skips the test with its install hint. Under CI=true it
fails the test with the same hint: CI installs every tool (.ci/run), so a missing one is a
broken set-up, and a silent skip would drop the guard the test stands for.
"""

from __future__ import annotations

import os

import pytest

ON_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(hint: str) -> None:
    """Stop this test for a missing tool: a skip with ``hint``, or under CI=true a failure with it."""
    if ON_CI:
        pytest.fail(f"{hint} (CI=true: a missing tool fails the run instead of skipping the test)", pytrace=False)
    pytest.skip(hint)


def needs(hint: str | None) -> pytest.MarkDecorator:
    """A mark: the test needs a tool, and ``hint`` (None when the tool is there) says how to install it."""
    return pytest.mark.needs_tool(hint)
