"""What the repository carries: source, docs and small fixtures, never a stray binary."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT

MAX_BYTES = 1 << 20  #: 1 MiB; the README's screenshots are the one place that may hold more


def test_no_committed_file_over_1_mib_outside_the_screenshots():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    big = [f"{f} ({(ROOT / f).stat().st_size} bytes)" for f in files
           if f and not f.startswith("docs/screenshots/") and (ROOT / f).is_file()
           and (ROOT / f).stat().st_size > MAX_BYTES]
    assert not big, big
