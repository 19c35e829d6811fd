from .mit_rwgka import MixVisionTransformerRWGKA

__all__ = ['MixVisionTransformerRWGKA']
