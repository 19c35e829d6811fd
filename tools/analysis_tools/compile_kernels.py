"""Compile every Triton kernel of the package ahead of time for real GPU architectures, with no GPU.

The tool's logic: :mod:`lab.proof.compile_kernels`."""
import os
import sys

# before triton is imported (by mmvisattn): the kernels must be real JITFunctions, not interpreted
# ones
os.environ.pop('TRITON_INTERPRET', None)

from lab.proof.compile_kernels import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
