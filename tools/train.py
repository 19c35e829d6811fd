"""Train a model from a config, as the stock ``tools/train.py`` of mmdet, mmseg and mmpretrain do
(``dist_train.sh`` and ``slurm_train.sh`` run it too; ``mim train mmvisattn CONFIG`` runs this
file):

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] ...

Every flag and its meaning: ``--help``, and :mod:`mmvisattn.launch.train`, the tool's logic.
"""
from mmvisattn.launch.train import main

if __name__ == '__main__':
    main()
