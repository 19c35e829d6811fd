"""The tools add the safeguard hooks to every config, whatever its bases; a config can turn one off."""
import pytest

from mmvisattn.launch import load_config
from mmvisattn.engine.hooks import SAFEGUARD_HOOKS

from ..conftest import REPO


@pytest.mark.parametrize('config', [
    'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py',  # our runtime base
    'configs/segformer_rwgka/segformer_mit-b0-rwgka_8xb2-160k_ade20k-512x512.py',  # a stock mmseg config
    'configs/smca/smca_r50_8xb2-50e_coco.py',  # a stock mmdet config
])
def test_every_config_gets_the_safeguards(config):
    hooks = load_config(str(REPO / config)).default_hooks
    assert {key: hooks[key] for key in SAFEGUARD_HOOKS} == SAFEGUARD_HOOKS
    assert 'checkpoint' in hooks and 'logger' in hooks  # the stock ones are kept


def test_none_turns_a_safeguard_off():
    cfg = load_config(str(REPO / 'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'),
                      {'default_hooks.random_state': None})
    assert 'random_state' not in cfg.default_hooks and 'finite_loss' in cfg.default_hooks
