from .residual_attention import ResidualAttention, TokenGrid

__all__ = ['ResidualAttention', 'TokenGrid']
