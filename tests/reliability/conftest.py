"""The reliability suite: its ``figure`` fixture and fuzz budget live in tests/conftest.py."""

from tests.conftest import FUZZ_EXAMPLES  # noqa: F401
