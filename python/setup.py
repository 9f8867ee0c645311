# SPDX-License-Identifier: Apache-2.0
"""Builds the kvcompress torch package: kvcompress._C, compiled ahead of time with torch's
cpp_extension (CUDAExtension + BuildExtension, ninja when installed) from csrc/ and the
library's headers in ../include (used where they are, never copied).

    pip install --no-build-isolation python/        # from the repository root

Environment:
  TORCH_CUDA_ARCH_LIST  architectures, e.g. "9.0" or "9.0;10.0" (default: the visible GPUs',
                        else 9.0)
  MAX_JOBS              parallel compile jobs (torch's default: the CPU count)
  KVC_INCLUDE_DIR       the directory holding kvcompress/kvcompress.cuh, when this folder was
                        copied away from its repository (default: ../include)
  KVC_NVCC_OPT          nvcc optimisation level (default 3; 1 for a quick compile check)
"""
import os
import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def include_dir() -> Path:
    given = os.environ.get("KVC_INCLUDE_DIR")
    where = Path(given).resolve() if given else HERE.parent / "include"
    if not (where / "kvcompress" / "kvcompress.cuh").is_file():
        raise SystemExit(
            f"kvcompress: no kvcompress/kvcompress.cuh under {where}. Build from the repository "
            "(pip install --no-build-isolation python/, which builds in place) or set "
            "KVC_INCLUDE_DIR to the repository's include/ directory.")
    return where


def version(include: Path) -> str:
    text = (include / "kvcompress" / "config.hpp").read_text()
    parts = [re.search(rf"#define KVC_VERSION_{k} (\d+)", text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def default_arch_list() -> str:
    """The visible GPUs' architectures, else 9.0 (torch's own default fails without a GPU)."""
    import torch

    archs = sorted({"%d.%d" % torch.cuda.get_device_capability(i)
                    for i in range(torch.cuda.device_count())})
    return ";".join(archs) or "9.0"


def extensions(include: Path):
    from torch.utils.cpp_extension import CUDAExtension

    if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = default_arch_list()
    opt = "-O" + os.environ.get("KVC_NVCC_OPT", "3")
    csrc = HERE / "csrc"
    # One op per .cu file, so that ninja compiles their kernel instances in parallel.
    sources = ["ops.cpp", "compress_op.cu", "insert_op.cu", "fused_op.cu"]
    return [CUDAExtension(
        name="kvcompress._C",
        sources=[str((csrc / s).relative_to(HERE)) for s in sources],
        include_dirs=[str(include), str(csrc)],
        extra_compile_args={
            "cxx": ["-O3", "-std=c++17"],
            "nvcc": [opt, "-std=c++17", "--expt-relaxed-constexpr"],
        },
    )]


include = include_dir()
try:
    from torch.utils.cpp_extension import BuildExtension
except ImportError as e:
    raise SystemExit("kvcompress: building needs torch installed first (with "
                     "--no-build-isolation, the torch of this environment)") from e

setup(
    version=version(include),
    ext_modules=extensions(include),
    cmdclass={"build_ext": BuildExtension},
)
