"""The GPU proof: every op of mmvisattn on CUDA, in one command of a few minutes on a bare GPU
machine.

The tool's logic: :mod:`lab.proof.ops`."""
import sys

from lab.proof.ops import main

if __name__ == '__main__':
    sys.exit(main())
