"""Every backbone with named sizes reads ``arch`` the same way: a name of its ``arch_zoo`` or a dict
with the same keys, and one ValueError line for anything else."""
import pytest

import mmvisattn  # noqa: F401
from mmvisattn.models.backbones import ESNet, PerViT, ViL
from mmvisattn.models.backbones.castling_levit import CastlingLeViT

BACKBONES = [ESNet, PerViT, ViL, CastlingLeViT]


@pytest.mark.parametrize('backbone', BACKBONES, ids=lambda cls: cls.__name__)
def test_unknown_arch_is_one_line(backbone):
    names = sorted(backbone.arch_zoo)
    with pytest.raises(ValueError, match=rf"^{backbone.__name__}: arch='huge'; expected one of "
                                         rf"{names!r}".replace('[', r'\[').replace(']', r'\]')):
        backbone(arch='huge')


@pytest.mark.parametrize('backbone', BACKBONES, ids=lambda cls: cls.__name__)
def test_arch_dict_missing_keys_is_named(backbone):
    with pytest.raises(ValueError, match=rf"^{backbone.__name__}: arch dict misses \["):
        backbone(arch=dict(depths=(1, 1, 1)))


@pytest.mark.parametrize('backbone', BACKBONES, ids=lambda cls: cls.__name__)
def test_a_named_arch_equals_its_dict(backbone):
    name = sorted(backbone.arch_zoo)[0]
    by_name, by_dict = backbone(arch=name), backbone(arch=dict(backbone.arch_zoo[name]))
    assert [p.shape for p in by_name.parameters()] == [p.shape for p in by_dict.parameters()]
