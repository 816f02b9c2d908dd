import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "docker: needs a running Docker engine and compose v2; skips with the reason when there is none")
