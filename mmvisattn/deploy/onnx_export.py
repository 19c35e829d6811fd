"""ONNX export of the project's models with ONNX Runtime parity, and Castling-ViT's "no quadratic
product" check of deploy mode (arXiv:2211.10526).

The TorchScript exporter runs the network up to its raw head outputs (``model._forward``); pre- and
post-processing stay with the caller, as in mmdeploy. Under export every op takes a backend that
traces; RWGK's solve exports as ``com.microsoft::Inverse`` (:func:`register_symbolics`); ripple and
peripheral attention hold one map size's tables and export for one input size
(:data:`FIXED_SIZE`)."""
import io
from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from ..models.attentions.base import switch_to_deploy  # noqa: F401  (part of this module's interface)

# 14: the first with the attention ops used; 18: the newest exported here
MIN_OPSET, MAX_OPSET = 14, 18

# attention modules whose exported graph holds one map size's tables (no dynamic sizes): which
FIXED_SIZE: Dict[str, str] = {'LongformerAttention': 'sliding-chunk tables',
                              'RippleAttention': 'ring index',
                              'PeripheralAttention': 'position attention Phi_p',}


class ExportError(ValueError):
    """A model, checkpoint or setting that cannot be exported; the message is one line."""


def fixed_size_refusal(module: nn.Module, name: str = '') -> str:
    """The one line refusing a dynamic-shape export of ``module`` (one of :data:`FIXED_SIZE`)."""
    where = f' ({name})' if name else ''
    return (f'{type(module).__name__}{where} exports for one input size only (its '
            f'{FIXED_SIZE[type(module).__name__]}: '
            'constants of the graph); export with static shapes')


def check_exportable(model: nn.Module, dynamic: bool) -> None:
    if not dynamic:
        return
    for name, module in model.named_modules():
        if type(module).__name__ in FIXED_SIZE:
            raise ExportError(fixed_size_refusal(module, name))


def check_opset(opset: int) -> int:
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ExportError(f'opset {opset} is not supported; expected {MIN_OPSET}..{MAX_OPSET}')
    return opset


def check_shape(shape: Sequence[int], stride: int) -> Tuple[int, int]:
    if len(shape) != 2 or any(side <= 0 or side % stride for side in shape):
        raise ExportError(f'input shape {tuple(shape)}; expected two positive multiples of '
                          f'{stride}, the '
                          "model's deepest stride")
    return tuple(shape)


class RawOutputs(nn.Module):
    """``model._forward(images)`` flattened to a tuple of tensors (the exported graph's outputs)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tuple[Tensor, ...]:
        return tuple(flatten(self.model._forward(images)))


def flatten(outputs) -> List[Tensor]:
    if isinstance(outputs, Tensor):
        return [outputs]
    return [tensor for item in outputs for tensor in flatten(item)]


def _solve_as_inverse(g, a, b, left):
    """``linalg_solve(A, B) = Inverse(A) @ B`` with ONNX Runtime's contrib ``Inverse`` (RWGK's
    ``M x M`` system, well conditioned: ``I - lam W`` with ``lam < 1`` and ``W`` row-stochastic)."""
    return g.op('MatMul', g.op('com.microsoft::Inverse', a), b)


def register_symbolics(opset: int) -> None:
    torch.onnx.register_custom_op_symbolic('aten::linalg_solve', _solve_as_inverse, opset)


def export_onnx(model: nn.Module, images: Tensor, opset: int, dynamic: bool = False) -> bytes:
    """The ONNX bytes of ``RawOutputs(model)`` traced on ``images`` (batch and spatial axes
    dynamic with ``dynamic``)."""
    check_exportable(model, dynamic)
    register_symbolics(check_opset(opset))
    axes = {'images': {0: 'batch', 2: 'height', 3: 'width'}} if dynamic else None
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(RawOutputs(model).eval(), (images,), buffer, dynamo=False,
                          opset_version=opset, input_names=['images'], dynamic_axes=axes)
    return buffer.getvalue()


def onnxruntime_session(onnx_bytes: bytes, threads: int = 0):
    """A CPU ONNX Runtime session with ``threads`` intra-op threads (0: its default)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(onnx_bytes, options, providers=['CPUExecutionProvider'])


def run_onnxruntime(onnx_bytes: bytes, images: Tensor, threads: int = 0) -> List[Tensor]:
    session = onnxruntime_session(onnx_bytes, threads)
    return [torch.from_numpy(out) for out in session.run(None, {'images': images.numpy()})]


def parity_error(reference: Sequence[Tensor], exported: Sequence[Tensor]) -> float:
    """Max |difference| of the outputs, relative to the larger of 1 and each output's largest."""
    if len(reference) != len(exported):
        raise ExportError(f'ONNX Runtime returned {len(exported)} outputs; the model returns '
                          f'{len(reference)}')
    return max(((ref - out).abs().max() / max(1.0, ref.abs().max().item())).item()
               for ref, out in zip(reference, exported))


def attention_sizes(model: nn.Module, images: Tensor) -> List[Tuple[int, int]]:
    """``(tokens, head_dims)`` of every project attention the model runs on ``images``."""
    from mmvisattn.models.attentions import BaseAttention
    sizes = set()
    hooks = [module.register_forward_hook(lambda mod, args,
                                          out: sizes.add((args[0].shape[1], mod.head_dims)))
             for module in model.modules() if isinstance(module, BaseAttention)]
    try:
        with torch.no_grad():
            RawOutputs(model).eval()(images)
    finally:
        for hook in hooks:
            hook.remove()
    return sorted(sizes)


def quadratic_matmuls(onnx_bytes: bytes, sizes: Sequence[Tuple[int, int]]) -> List[str]:
    """``MatMul`` nodes of an attention's score shape, ``(tokens, head_dims) x (head_dims,
    tokens)``, for the ``(tokens, head_dims)`` pairs the model sees: what a linear-time deploy graph
    must not hold (static shapes needed)."""
    import onnx
    graph = onnx.shape_inference.infer_shapes(onnx.load_from_string(onnx_bytes)).graph
    shapes = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        shapes[value.name] = [dim.dim_value if dim.HasField('dim_value') else None
                              for dim in value.type.tensor_type.shape.dim]
    wanted = set(sizes)
    found = []
    for node in graph.node:
        if node.op_type != 'MatMul':
            continue
        shape, left = shapes.get(node.output[0], []), shapes.get(node.input[0], [])
        if (
            len(shape) >= 2
            and len(left) >= 2
            and shape[-1] == shape[-2]
            and (shape[-1], left[-1]) in wanted
        ):
            found.append(f'{node.name} -> {shape}')
    return found
