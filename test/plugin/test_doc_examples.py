"""The complete Python examples of README.md and docs/ run as written, on aclsim."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.mode_independent

ROOT = Path(__file__).resolve().parents[2]


def _blocks(doc: str = "README.md") -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "example.py"
    script.write_text(code)
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=180, check=False
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def test_handshake_example(tmp_path: Path) -> None:
    """The producer/consumer example: the consumer's increment is seen after its record."""
    r = _run(_blocks()[0], tmp_path)
    assert r.stdout.split() == ["42.0"]


@pytest.mark.devices(2)
def test_handle_and_descriptor_example(tmp_path: Path) -> None:
    """The second example continues the first (its ``e`` and ``x``), in the producer after the join."""
    first, second = _blocks()[:2]
    code = first + textwrap.indent(second, "    ") + "    print(e2.device, y.device, torch.equal(y.cpu(), x.cpu()))\n"
    r = _run(code, tmp_path)
    assert r.stdout.split()[-3:] == ["npu:0", "npu:1", "True"]


def test_events_example(tmp_path: Path) -> None:
    """docs/events.md: the consumer reads the producer's values, then signals back after its own write."""
    r = _run(_blocks("docs/events.md")[0], tmp_path)
    assert sorted(r.stdout.split()) == ["2048.0", "3.0"]  # two processes: either order


def test_sharing_example(tmp_path: Path) -> None:
    """docs/sharing.md: the tensor sent while its write was still queued arrives with the written values."""
    r = _run(_blocks("docs/sharing.md")[0], tmp_path)
    assert r.stdout.split() == [str(float(2 << 20))]


def test_external_stream_example(tmp_path: Path) -> None:
    """docs/external_stream.md: torch work on a stream another library created."""
    r = _run(_blocks("docs/external_stream.md")[0], tmp_path)
    assert "interop example: ok" in r.stdout
