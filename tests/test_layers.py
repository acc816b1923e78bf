"""The sans-io layers stay sans-io: importing them loads no trio, hypercorn or httpx."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import proxai

#: Packages and modules of pure protocol logic and decisions: bytes, events and the time in.
SANS_IO = ["wire", "protocols", "policy", "translate", "outcome", "errors", "config", "converters"]
SANS_IO_MODULES = ["proxai.relay.ending", "proxai.relay.messages"]
IO_LIBRARIES = ("trio", "hypercorn", "httpx", "httpcore", "anyio")


def sans_io_modules() -> list[str]:
    names = list(SANS_IO_MODULES)
    for name in SANS_IO:
        module = f"proxai.{name}"
        names.append(module)
        path = [f"{proxai.__path__[0]}/{name}"]
        names += [m.name for m in pkgutil.walk_packages(path, prefix=f"{module}.")]
    return names


@pytest.mark.parametrize("module", sans_io_modules())
def test_sans_io_module_imports_no_io_library(module: str) -> None:
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(' '.join(m for m in {IO_LIBRARIES!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == [], f"{module} pulls in {loaded}"
