"""Install the carried OpenMMLab stack on a bare GPU machine (``make gpu-setup``), without network.

The tool's logic: :mod:`lab.gpu_setup`."""
from lab.gpu_setup import main

if __name__ == '__main__':
    main()
