"""The OpenMMLab stack for a bare GPU machine, prepared here (``make gpu-wheelhouse``).

The tool's logic: :mod:`lab.wheelhouse`."""
from lab.wheelhouse import main

if __name__ == '__main__':
    main()
