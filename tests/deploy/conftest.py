import os

import pytest

# `.ci/run` sets this once it has started a Docker engine: there, a container test that skips (no engine, no base
# image) is a failure, not a silent pass.
EXPECT_DOCKER = os.environ.get("SOTTO_EXPECT_DOCKER") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "docker: needs a running Docker engine and compose v2; skips with the reason when there is none "
        "(fails instead under SOTTO_EXPECT_DOCKER=1, as .ci/run sets)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if EXPECT_DOCKER and report.skipped and item.get_closest_marker("docker") is not None:
        report.outcome = "failed"
        report.longrepr = f"skipped where a Docker engine was expected (SOTTO_EXPECT_DOCKER=1): {report.longrepr}"
