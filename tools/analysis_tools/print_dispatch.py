"""Which implementation of each op every attention layer of a config runs, and why not the others.

The tool's logic: :mod:`mmvisattn.analysis.print_dispatch`."""
import sys

from mmvisattn.analysis.print_dispatch import main

if __name__ == '__main__':
    sys.exit(main())
