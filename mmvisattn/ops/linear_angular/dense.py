"""Linear-angular attention in dense form, for small maps (arXiv:2211.10526, Eq. 3): the ``N x N``
angular kernel ``1/2 + q^ k^T / pi`` formed by one batched product in the inputs' precision (tensor
cores for half inputs), times ``v`` by a second, over its row sums. Quadratic: meant for small maps,
where the two products may beat the summaries of :mod:`.pytorch` / :mod:`.triton` and their launches;
up to where it does is measured per GPU (:mod:`mmvisattn.ops.utils.crossover`). Autograd through
torch; no hand-written backward.

Mixed precision (:mod:`mmvisattn.ops.utils.amp`): queries and keys are normalised as the torch path
does them (:func:`.pytorch.normalise`: float32, float64 stays) and cast back for the products, which
accumulate in float32 as torch's half matmuls do; the kernel's entries lie in [0.18, 0.82], so half holds them; the
row sums are taken in float32 and the output comes back in ``v``'s dtype. Autocast is off inside.
"""
import math

import torch
from torch import Tensor

from ..utils.amp import no_autocast
from .pytorch import normalise


def linear_angular_attention_dense(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``(B, heads, N, d)`` queries and keys, ``(B, heads, N, d_v)`` values -> ``(B, heads, N, d_v)``."""
    with no_autocast(q.device.type):
        q_hat, k_hat = normalise(q)[0].to(v.dtype), normalise(k)[0].to(v.dtype)
        kernel = (q_hat @ k_hat.transpose(-1, -2)).mul_(1 / math.pi).add_(0.5)
        wide = torch.promote_types(v.dtype, torch.float32)
        return ((kernel @ v).to(wide) / kernel.sum(dim=-1, keepdim=True, dtype=wide)).to(v.dtype)
