"""pytest fixtures shared by tests/cli and tests/models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
for sub in (TESTS_DIR, TESTS_DIR / "models"):
    if str(sub) not in sys.path:
        sys.path.insert(0, str(sub))

import anvil_testing  # noqa: E402


@pytest.fixture(scope="session")
def anvil():
    """A function that runs the anvil binary: anvil("run", model, ..., timeout=S).

    Fails (not skips) every test that uses it when the binary is missing, so
    a broken build cannot pass as skipped tests.
    """
    path = anvil_testing.anvil_bin()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"anvil binary not found at {path}: build it (make test) or set ANVIL_BIN",
                    pytrace=False)
    return anvil_testing.run_anvil
