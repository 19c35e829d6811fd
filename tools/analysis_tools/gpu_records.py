"""The records of GPU runs as data: one JSON file per run under ``docs/records/gpu/``, and the
GPU tables generated from the newest record of each GPU, never written by hand.

The tool's logic: :mod:`lab.records`."""
import sys

from lab.records import main

if __name__ == '__main__':
    sys.exit(main())
