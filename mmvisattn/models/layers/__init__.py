from .residual_attention import ResidualAttention, TokenGrid
from .smca_transformer import SMCATransformerDecoder, SMCATransformerEncoder

__all__ = ['ResidualAttention', 'TokenGrid', 'SMCATransformerEncoder', 'SMCATransformerDecoder']
