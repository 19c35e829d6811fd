"""Registration into ATTENTIONS and into both mmdet and mmseg MODELS, and the config route
``custom_imports=dict(imports=['mmvisattn'])``."""
import subprocess
import sys

import torch.nn as nn
from mmdet.registry import MODELS as MMDET_MODELS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmseg.registry import MODELS as MMSEG_MODELS

from mmvisattn.registry import ATTENTIONS, register_model


def test_attentions_is_a_child_of_models():
    assert ATTENTIONS.parent is MMENGINE_MODELS
    assert ATTENTIONS.scope == 'mmvisattn'
    assert {'SoftmaxAttention', 'LinearAttention',
            'SpatialReductionAttention'} <= set(ATTENTIONS.module_dict)


def test_register_model_reaches_both_scopes():
    @register_model
    class RegistryProbeBackbone(nn.Module):
        pass

    try:
        assert MMDET_MODELS.get('RegistryProbeBackbone') is RegistryProbeBackbone
        assert MMSEG_MODELS.get('RegistryProbeBackbone') is RegistryProbeBackbone
    finally:
        MMDET_MODELS.module_dict.pop('RegistryProbeBackbone')
        MMSEG_MODELS.module_dict.pop('RegistryProbeBackbone')


def test_custom_imports_registers_attentions(tmp_path):
    config = tmp_path / 'cfg.py'
    config.write_text("custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)\n")
    script = (
        f'from mmengine.config import Config\nimport sys\nConfig.fromfile({str(config)!r})\n'
        "assert 'mmvisattn' in sys.modules\n"
        'from mmvisattn.registry import ATTENTIONS\n'
        "print(sorted(ATTENTIONS.module_dict))\n")
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         check=True).stdout
    assert 'SoftmaxAttention' in out


def test_optional_settings_reach_only_attentions_that_take_them():
    """A backbone offers its stage settings to any attention without knowing its type."""
    from mmvisattn.registry import attention_accepts, build_attention
    stage = dict(window=3, sr_ratio=2)
    softmax = build_attention(dict(type='SoftmaxAttention'), stage, num_extra_tokens=1,
                              embed_dims=8, num_heads=2)
    assert not attention_accepts(dict(type='SoftmaxAttention'),
                                 'window') and softmax.num_extra_tokens == 1
    longformer = build_attention(dict(type='LongformerAttention'), stage, embed_dims=8, num_heads=2)
    assert (longformer.window, longformer.num_extra_tokens) == (3, 0)
    reduced = build_attention(dict(type='SpatialReductionAttention'), stage, embed_dims=8,
                              num_heads=2)
    assert reduced.sr_ratio == 2
    own = build_attention(dict(type='LongformerAttention', window=5), stage, embed_dims=8,
                          num_heads=2)
    assert own.window == 5  # the config wins over the offer
