"""What mmdeploy 1.3.1 needs from the pinned torch and from our ops, for a deploy config that names
this module in ``custom_imports`` (those in ``configs/_deploy_/`` do):

* the TorchScript exporter by default and ``symbolic_opset9._cast_Long`` again
  (:data:`mmvisattn.compat.DEPLOY_PATCHES`);
* RWGK attention's ``M x M`` solve as ONNX Runtime's ``com.microsoft::Inverse``, or the Neumann
  product (:func:`mmvisattn.ops.rwgk.neumann_solve`) where that is missing;
* ``F.scaled_dot_product_attention`` with the reciprocal ``scale`` mmdeploy's form expects
  (:func:`scaled_dot_product_attention_scaled`);
* an aligned RoIAlign refused below opset 16, where ONNX widens small RoIs
  (:func:`aligned_roi_align_from_opset_16`);
* a dynamic deploy config refused for attentions whose graph holds one map size's tables
  (:data:`~.onnx_export.FIXED_SIZE`).

mmdeploy calls ``model.backbone.switch_to_deploy()`` itself. Importing logs one line of what
changed; ``import mmvisattn`` changes none of this."""
from functools import partial

from mmdeploy.core import FUNCTION_REWRITER
from mmdeploy.core.rewriters.rewriter_utils import Checker
from mmdeploy.pytorch.functions.multi_head_attention_forward import (
    scaled_dot_product_attention__default,
)
from mmdeploy.utils import get_ir_config, is_dynamic_shape
from mmengine.logging import print_log

import mmvisattn  # noqa: F401  (registers the models the deploy config's model config names)

from ..compat import APPLIED, DEPLOY_PATCHES, SKIP_VARIABLE, apply, export_onnx_with_torchscript
from ..ops.rwgk import neumann_solve
from ..registry import ATTENTIONS
from .onnx_export import FIXED_SIZE, ExportError, fixed_size_refusal, register_symbolics

# mmdeploy's deploy configs export at opset 11; the translation is registered from there up
MMDEPLOY_OPSET = 11
INVERSE_BACKENDS = ('onnxruntime',)
RANDOM_WALK = 'mmvisattn.ops.rwgk.pytorch.random_walk'
SDPA = 'torch.nn.functional.scaled_dot_product_attention'
ROI_ALIGN = 'mmcv.ops.RoIAlign.forward'
# the first opset whose RoiAlign samples as mmcv's aligned RoIAlign (coordinate_transformation_mode)
ALIGNED_ROI_OPSET = 16


def fixed_size_forward(self, *args, **kwargs):
    """An attention of :data:`FIXED_SIZE` under mmdeploy's export: refused with dynamic sizes."""
    context = FUNCTION_REWRITER.get_context()
    if is_dynamic_shape(context.cfg):
        raise ExportError(f'{fixed_size_refusal(self)} (a static deploy config: '
                          'configs/_deploy_/*_onnxruntime_static.py)')
    return context.origin_func(self, *args, **kwargs)


def guard_fixed_sizes() -> None:
    for name in FIXED_SIZE:
        module = ATTENTIONS.get(name)
        FUNCTION_REWRITER.register_rewriter(f'{module.__module__}.{name}.forward')(fixed_size_forward)


def random_walk_portable(q, k, v, anchor_q, anchor_k, lam, solver=None):
    """RWGK's solve in matrix products (:func:`~mmvisattn.ops.rwgk.neumann_solve`)."""
    context = FUNCTION_REWRITER.get_context()
    return context.origin_func(q, k, v, anchor_q, anchor_k, lam, partial(neumann_solve, lam=lam))


def random_walk_inverse(q, k, v, anchor_q, anchor_k, lam, solver=None):
    """RWGK's solve as ``aten::linalg_solve`` (exported as ``com.microsoft::Inverse``)."""
    return FUNCTION_REWRITER.get_context().origin_func(q, k, v, anchor_q, anchor_k, lam)


def choose_solves() -> None:
    """The Neumann product for every backend (the default rewriter), ``Inverse`` where it runs."""
    FUNCTION_REWRITER.register_rewriter(RANDOM_WALK)(random_walk_portable)
    for backend in INVERSE_BACKENDS:
        FUNCTION_REWRITER.register_rewriter(RANDOM_WALK, backend=backend)(random_walk_inverse)


def aligned_roi_align_from_opset_16(self, input, rois):
    """mmcv's aligned RoIAlign under export to ONNX Runtime, refused below opset 16 (RoiAlign-10
    widens RoIs under one feature pixel)."""
    context = FUNCTION_REWRITER.get_context()
    opset = get_ir_config(context.cfg).get('opset_version', MMDEPLOY_OPSET)
    if self.aligned and opset < ALIGNED_ROI_OPSET:
        raise ExportError('RoIAlign(aligned=True) exports to ONNX Runtime exactly from opset '
                          f'{ALIGNED_ROI_OPSET}, '
                          f'not {opset}: set onnx_config.opset_version={ALIGNED_ROI_OPSET} in the '
                          'deploy config (configs/_deploy_/instance-seg_onnxruntime_*.py do)')
    return context.origin_func(self, input, rois)


class EveryBackend(Checker):
    """Passed on every backend: a rewriter with it precedes mmdeploy's default one."""

    def check(self, env) -> bool:
        return True


def scaled_dot_product_attention_scaled(query, key, value, attn_mask=None, dropout_p=0.0,
                                        scale=None, is_causal=False):
    """mmdeploy's export of torch's attention with ``scale`` as torch means it: mmdeploy 1.3.1
    divides the scores by ``scale``, so it gets the reciprocal."""
    return scaled_dot_product_attention__default(query, key, value, attn_mask, dropout_p,
                                                 None if scale is None else 1.0 / scale, is_causal)


def enable() -> str:
    """The deploy patches, RWGK's translation and the fixed-size guards (once); the line logged."""
    apply(*DEPLOY_PATCHES)
    register_symbolics(MMDEPLOY_OPSET)
    guard_fixed_sizes()
    choose_solves()
    FUNCTION_REWRITER.register_rewriter(SDPA,
                                        extra_checkers=EveryBackend())(scaled_dot_product_attention_scaled)
    FUNCTION_REWRITER.register_rewriter(ROI_ALIGN,
                                        backend='onnxruntime')(aligned_roi_align_from_opset_16)
    patched = [patch.__name__ for patch in DEPLOY_PATCHES if patch.__name__ in APPLIED]
    exporter = ('torch.onnx.export takes the TorchScript exporter (dynamo=False) unless asked '
                'otherwise'
                if export_onnx_with_torchscript.__name__ in APPLIED else
                f'torch.onnx.export as it is ({SKIP_VARIABLE} leaves export_onnx_with_torchscript '
                'out)')
    return (f'mmvisattn.deploy.mmdeploy_support: {exporter}; patched '
            f'{", ".join(patched) or "nothing"}; '
            'aten::linalg_solve exports as com.microsoft::Inverse + MatMul from opset '
            f'{MMDEPLOY_OPSET} for '
            f'{", ".join(INVERSE_BACKENDS)}, as MatMuls (a Neumann product) for the other '
            'backends; '
            f'{", ".join(FIXED_SIZE)} export with static shapes only; scaled_dot_product_attention '
            'exports with '
            'its scale multiplying the scores; RoIAlign(aligned=True) exports to onnxruntime from '
            f'opset {ALIGNED_ROI_OPSET}')


print_log(enable(), logger='current')
