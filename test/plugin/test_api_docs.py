"""docs/api.md is generated from the docstrings and must match them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_api_docs  # noqa: E402

pytestmark = pytest.mark.mode_independent


def test_api_reference_is_current() -> None:
    text = gen_api_docs.render()
    assert "(no docstring)" not in text, "every public name needs a docstring"
    assert (ROOT / "docs" / "api.md").read_text() == text, "docs/api.md is stale: run python tools/gen_api_docs.py"
