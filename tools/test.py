"""Test a model from a config, as the stock ``tools/test.py`` of mmdet, mmseg and mmpretrain do
(``dist_test.sh`` and ``slurm_test.sh`` run it too; ``mim test mmvisattn CONFIG`` runs this file):

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out OUT] ...

Every flag and its meaning: ``--help``, and :mod:`mmvisattn.launch.test`, the tool's logic.
"""
from mmvisattn.launch.test import main

if __name__ == '__main__':
    main()
