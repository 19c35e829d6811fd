from .castling_levit import CastlingLeViT
from .castling_vit import CastlingViT
from .deit_ripple import DeiTRipple
from .esnet import ESNet
from .mit_rwgka import MixVisionTransformerRWGKA
from .pervit import PerViT
from .vil import ViL

__all__ = ['MixVisionTransformerRWGKA', 'CastlingViT', 'CastlingLeViT', 'ESNet', 'PerViT', 'ViL',
           'DeiTRipple']
