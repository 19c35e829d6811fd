from .base import BaseAttention, QKVAttention
from .castling import LinearAngularAttention
from .linear import LinearAttention
from .longformer import LongformerAttention
from .peripheral import PeripheralAttention
from .ripple import RippleAttention, RippleLinearAttention
from .rwgk import RWGKAttention
from .softmax import SoftmaxAttention
from .spatial_reduction import SpatialReductionAttention

__all__ = ['BaseAttention', 'QKVAttention', 'SoftmaxAttention', 'LinearAttention',
           'SpatialReductionAttention', 'RWGKAttention', 'LinearAngularAttention',
           'RippleAttention', 'RippleLinearAttention', 'LongformerAttention', 'PeripheralAttention']
