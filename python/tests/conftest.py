import gc
import os
import sys

import pytest

import weft


@pytest.fixture
def rt():
    """A 2-worker runtime, closed after the test (its tasks finish first)."""
    r = weft.Runtime(workers=2)
    try:
        with r:
            yield r
    finally:
        r.close()
        gc.collect()


def pytest_configure(config):
    # Every test has a timeout (pytest-timeout), even without the ini file.
    if not config.getoption("timeout", None):
        config.option.timeout = 120
