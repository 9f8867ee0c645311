# SPDX-License-Identifier: Apache-2.0
"""pytest setup for the kvcompress package's tests (python/README.md, "Tests").

The tests import the installed package. Where it is not installed (CI: no torch, no build),
the source folder python/kvcompress is imported instead, which is enough for the pure-Python
parts (the vLLM swap, the signatures); the op tests then skip, saying why.
"""
import sys
from pathlib import Path

try:
    import kvcompress  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import kvcompress  # noqa: F401
