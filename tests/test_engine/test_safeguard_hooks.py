"""The safeguard hooks are in the configs: every project config reaches
``configs/_base_/safeguard_hooks.py``, whatever its bases, the tools add nothing to it, a config can
leave one out, and stock mmdet ``tools/train.py`` runs them."""
import sys
from pathlib import Path

import mmdet
import pytest
from mmengine.config import Config

from mmvisattn.launch import load_config

from ..conftest import MODEL_CONFIGS, REPO, run_command, tool_env

SAFEGUARDS = ['RandomStateHook', 'FiniteLossHook', 'RankMeanLossHook', 'DroppedAnnotationsHook',
              'PreemptionHook']
CONFIGS = MODEL_CONFIGS
DET_DEMO = REPO / 'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'


def hook_types(cfg: Config) -> list:
    return [hook['type'] for hook in cfg.get('custom_hooks', [])]


@pytest.mark.parametrize('config', CONFIGS, ids=lambda path: path.name)
def test_every_config_runs_the_safeguards_and_keeps_the_stock_hooks(config):
    cfg = Config.fromfile(str(config))
    assert hook_types(cfg)[:len(SAFEGUARDS)] == SAFEGUARDS
    assert 'mmvisattn' in cfg.custom_imports['imports']  # the hooks' types are registered by it
    assert 'checkpoint' in cfg.default_hooks and 'logger' in cfg.default_hooks


@pytest.mark.parametrize('config', [DET_DEMO, REPO / 'configs/smca/smca_r50_8xb2-50e_coco.py'])
def test_the_tools_add_nothing_a_config_does_not_show(config):
    loaded = load_config(str(config))
    plain = Config.fromfile(str(config))
    assert loaded.custom_hooks == plain.custom_hooks and loaded.default_hooks == plain.default_hooks


def test_a_config_can_leave_a_safeguard_out(tmp_path):
    config = tmp_path / 'no_random_state.py'
    config.write_text(f"_base_ = '{DET_DEMO}'\ncustom_hooks = [h for h in _base_.custom_hooks if "
                      "h['type'] != 'RandomStateHook']\n")
    assert hook_types(Config.fromfile(str(config))) == SAFEGUARDS[1:]


def test_stock_mmdet_train_runs_the_safeguard_hooks(workspace, tmp_path):
    """mmdet's own ``tools/train.py`` (installed with mmdet for ``mim train``) on a project config:
    the Runner's hook table lists the safeguards."""
    stock_train = Path(mmdet.__file__).parent / '.mim' / 'tools' / 'train.py'
    done = run_command([sys.executable, str(stock_train), str(DET_DEMO), '--work-dir',
                        str(tmp_path), '--cfg-options',
                        'train_cfg.max_iters=1', 'train_dataloader.batch_size=2',
                        'train_cfg.val_interval=100'],
                       cwd=workspace, env=tool_env())
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stdout + done.stderr
    table = log[log.index('Hooks will be executed in the following order'):]
    assert all(hook in table for hook in SAFEGUARDS), table[:3000]
