"""Ember's version comes from one place (pyproject.toml's [project] version, compiled into
the extension: include/ember/version.h); ``ember.__version__`` must equal the installed
package's metadata and that line of pyproject.toml."""

import importlib.metadata
import pathlib
import re

import pytest

import ember

_PYPROJECT = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"


def _pyproject_version():
    """The [project] version of the source tree's pyproject.toml (tomllib needs 3.11)."""
    section = None
    for line in _PYPROJECT.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        m = re.fullmatch(r'version = "([^"]+)"', line)
        if m and section == "[project]":
            return m.group(1)
    raise AssertionError(f"no version line under [project] in {_PYPROJECT}")


def test_version_is_the_package_metadata():
    try:
        meta = importlib.metadata.version("ember")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the ember package is not installed (only a build folder is loaded)")
    assert ember.__version__ == meta


def test_version_is_pyprojects():
    if not _PYPROJECT.exists():
        pytest.skip("not run from a source tree")
    assert ember.__version__ == _pyproject_version()


def test_version_is_the_extensions_and_semantic():
    assert ember.__version__ == ember._C.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", ember.__version__), ember.__version__
