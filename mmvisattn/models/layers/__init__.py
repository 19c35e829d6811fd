from .residual_attention import ResidualAttention, TokenGrid
from .smca_transformer import SMCATransformerDecoder, SMCATransformerEncoder
from .weight_init import INIT_STD, init_embedding, init_linear_layers

__all__ = ['ResidualAttention', 'TokenGrid', 'SMCATransformerEncoder', 'SMCATransformerDecoder',
           'INIT_STD', 'init_embedding', 'init_linear_layers']
