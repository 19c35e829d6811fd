"""The OpenMMLab stack for a bare GPU machine, prepared here (``make gpu-wheelhouse``).

The tool's logic: :mod:`mmvisattn.proof.wheelhouse`."""
from mmvisattn.proof.wheelhouse import main

if __name__ == '__main__':
    main()
