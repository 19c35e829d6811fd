from .castling_vit import CastlingViT
from .mit_rwgka import MixVisionTransformerRWGKA

__all__ = ['MixVisionTransformerRWGKA', 'CastlingViT']
