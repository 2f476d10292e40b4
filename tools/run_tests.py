"""Run the test suite in parts side by side: ``python tools/run_tests.py [--jobs N] [pytest args]``.

Most tests start processes (each imports torch and torch_npu, about 3 CPU-s)
and wait for them, so one pytest keeps about one core busy. On CI's two
cores, two parts side by side take about half the time of one run.

Part ``k`` of ``N`` runs every ``N``-th test of the selection (pytest's
``--shard k/N``, added by test/conftest.py), so each part gets its share of
every module. Part 1's output shows as it runs; the others' follows once
they end, then one line per part and the totals. The exit status is the
first failing part's; a part with no test selected counts as passed while
another ran tests. ``--jobs 1`` runs plain pytest.

The parts keep out of pytest's cache (each would overwrite the others'
record of failures). Options that use it (``--lf``, ``--ff``, ``--sw``, ...)
run one plain pytest instead, which says so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NO_TESTS_COLLECTED = 5  # pytest's exit status
# "629 passed, 3 skipped, 1 warning in 748.24s (0:12:28)" or "no tests ran in 0.01s", with or without "=" around.
SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ [a-z]+(?:, \d+ [a-z]+)*|no tests ran) in [\d.]+s\b")
COUNT = re.compile(r"(\d+) ([a-z]+)")
# Summed over the parts, in pytest's order. Not "deselected": each part's
# counts the other parts' tests too.
TOTALLED = ("failed", "passed", "skipped", "xfailed", "xpassed", "warnings", "errors")
PLURAL = {"warning": "warnings", "error": "errors"}  # pytest says "1 warning", "2 warnings"
# pytest's options that read or write its cache between runs.
CACHE_OPTIONS = (
    "--lf",
    "--last-failed",
    "--ff",
    "--failed-first",
    "--nf",
    "--new-first",
    "--sw",
    "--stepwise",
    "--sw-skip",
    "--stepwise-skip",
    "--cache-show",
    "--cache-clear",
)


def summary_of(output: str) -> dict[str, int] | None:
    """The counts of pytest's final summary line in ``output``, if any."""
    for line in reversed(output.splitlines()):
        m = SUMMARY.match(line.strip())
        if m:
            return {word: int(n) for n, word in COUNT.findall(m["counts"])}
    return None


def combined_status(statuses: list[int]) -> int:
    """One exit status for all parts (see the module docstring)."""
    if all(s == NO_TESTS_COLLECTED for s in statuses):
        return NO_TESTS_COLLECTED
    return next((s for s in statuses if s not in (0, NO_TESTS_COLLECTED)), 0)


def run_parts(jobs: int, pytest_args: list[str]) -> int:
    """Run ``jobs`` parts of the selection side by side; returns the combined exit status."""
    base = [sys.executable, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider"]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="run_tests.") as tmp:
        logs = {k: Path(tmp) / f"part{k}.log" for k in range(2, jobs + 1)}
        procs = []
        try:
            # Part 1 goes through a pipe that is echoed as it comes (and kept
            # for the summary); the others go to files.
            procs.append(
                subprocess.Popen([*base, "--shard", f"1/{jobs}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            )
            for k in range(2, jobs + 1):
                with open(logs[k], "wb") as log:
                    procs.append(
                        subprocess.Popen([*base, "--shard", f"{k}/{jobs}"], stdout=log, stderr=subprocess.STDOUT)
                    )
            first = bytearray()
            assert procs[0].stdout is not None
            while chunk := os.read(procs[0].stdout.fileno(), 65536):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
                first += chunk
            statuses = [p.wait() for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        outputs = [first.decode(errors="replace")] + [logs[k].read_text(errors="replace") for k in range(2, jobs + 1)]
    for k in range(2, jobs + 1):
        print(f"\n== part {k}/{jobs} (tools/run_tests.py: printed once it ended)", flush=True)
        sys.stdout.write(outputs[k - 1])
    print(f"\n== {jobs} parts side by side (tools/run_tests.py)")
    totals: dict[str, int] = {}
    unknown = False  # a part printed no summary line (pytest -qq prints none, a crash neither)
    for k, (out, status) in enumerate(zip(outputs, statuses, strict=True), start=1):
        found = summary_of(out)
        unknown |= found is None
        if found is None:
            counts = "no summary line"
        else:
            counts = ", ".join(f"{n} {w}" for w, n in found.items()) or "no tests ran"
        print(f"part {k}/{jobs}: exit {status}: {counts}")
        for word, n in (found or {}).items():
            key = PLURAL.get(word, word)
            if key in TOTALLED:
                totals[key] = totals.get(key, 0) + n
    status = combined_status(statuses)
    singular = {plural: one for one, plural in PLURAL.items()}
    phrases = [f"{totals[w]} {singular.get(w, w) if totals[w] == 1 else w}" for w in TOTALLED if w in totals]
    total = ", ".join(phrases) or "no tests ran"
    if unknown:
        total = "counts unknown (a part printed no summary line)" + (f"; the others: {total}" if phrases else "")
    print(f"all parts: {total} in {time.monotonic() - start:.1f}s: exit {status}", flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--jobs",
        default=os.environ.get("TEST_JOBS", "2"),
        help="parts run side by side (default: $TEST_JOBS, else 2); 1 runs plain pytest",
    )
    args, pytest_args = parser.parse_known_args(argv)
    if not args.jobs.isdigit() or int(args.jobs) < 1:
        parser.error(f"--jobs (or TEST_JOBS) must be a whole number, 1 or more; got {args.jobs!r}")
    args.jobs = int(args.jobs)
    cache = next((a for a in pytest_args if a.split("=")[0] in CACHE_OPTIONS), None)
    if cache is not None and args.jobs > 1:
        print(
            f"tools/run_tests.py: {cache} uses pytest's cache, which parts stay out of: running one pytest", flush=True
        )
        args.jobs = 1
    try:
        if args.jobs == 1:
            return subprocess.call([sys.executable, "-m", "pytest", *pytest_args])
        return run_parts(args.jobs, pytest_args)
    except KeyboardInterrupt:  # the parts got the terminal's SIGINT too; run_parts stopped what was left
        print("\ntools/run_tests.py: interrupted", file=sys.stderr)
        return 2  # pytest's "interrupted"


if __name__ == "__main__":
    sys.exit(main())
