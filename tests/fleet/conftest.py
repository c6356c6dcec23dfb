"""What the fleet tests need from the machine: missing in CI is a failure, never a skip."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def require(what: str, present: bool, how: str) -> None:
    if present:
        return
    if os.environ.get("CI") or os.environ.get("SPECSCOPE_REQUIRE_ENGINES"):
        pytest.fail(f"{what} is missing in CI: {how}")
    pytest.skip(f"{what} is missing: {how}")


@pytest.fixture
def spark_ready() -> None:
    require("Java", shutil.which("java") is not None, ".ci/run installs default-jre-headless")
    require("pyspark", importlib.util.find_spec("pyspark") is not None,
            "`make test` installs the cluster extra")


@pytest.fixture
def prometheus_ready() -> str:
    path = shutil.which("prometheus")
    require("Prometheus", path is not None and shutil.which("promtool") is not None,
            ".ci/run installs Debian's prometheus package")
    return path
