"""Whole models on a GPU through the stock tools (``make gpu-proof-models``): every family's shipped
config trained by ``tools/train.py`` (the real Runner, hooks and optimizer wrapper), tested by
``tools/test.py`` and resumed, beside the stock model it replaces.

The tool's logic: :mod:`lab.proof.models`."""
import sys

from lab.proof.models import main

if __name__ == '__main__':
    sys.exit(main())
