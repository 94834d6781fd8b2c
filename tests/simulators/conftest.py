"""Every simulator test draws at low resolution: rendering is still exercised, the pixels are not under test."""

from __future__ import annotations

import pytest

from kvcourse.simulators.base import SimulatorView


@pytest.fixture(autouse=True)
def low_resolution(monkeypatch):
    monkeypatch.setattr(SimulatorView, "render_dpi", 30)
