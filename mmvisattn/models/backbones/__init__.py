from .castling_levit import CastlingLeViT
from .castling_vit import CastlingViT
from .esnet import ESNet
from .mit_rwgka import MixVisionTransformerRWGKA
from .pervit import PerViT
from .vil import ViL

__all__ = ['MixVisionTransformerRWGKA', 'CastlingViT', 'CastlingLeViT', 'ESNet', 'PerViT', 'ViL']
