# SPDX-License-Identifier: Apache-2.0
"""The installed distribution's version (setup.py reads it from include/kvcompress/config.hpp)."""
try:
    from importlib.metadata import PackageNotFoundError, version as _version

    try:
        __version__ = _version("kvcompress")
    except PackageNotFoundError:  # imported from the source tree, not installed
        __version__ = "0+source"
except ImportError:  # pragma: no cover - Python < 3.8
    __version__ = "0+source"
