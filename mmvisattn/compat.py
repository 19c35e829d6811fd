"""Every change the package makes to another library's code, one named function each in
:data:`PATCHES` (docs/advanced/compat.md: what each alters, who meets the defect, upstream).

On import only :data:`FIXES` (defects of the pinned stack a user meets without our models) and
:data:`ADDITIONS` (names stock lacks) apply. The rest is opt-in: :data:`TOOL_PATCHES` through the
project's tools, ``count_dropped_annotations`` through ``DroppedAnnotationsHook``,
:data:`DEPLOY_PATCHES` through :mod:`mmvisattn.deploy.mmdeploy_support`.
``MMVISATTN_SKIP_PATCHES`` (comma-separated names) leaves patches out; :data:`APPLIED` feeds the
line :func:`patches_line` logs.
"""
import copy
import functools
import importlib
import inspect
import logging
import os
from collections import Counter
from pickle import UnpicklingError
from typing import Any, Callable, List, Tuple, Union

import torch
from mmengine.logging.history_buffer import HistoryBuffer

from .ops.utils.amp import HALF_DTYPES
from .utils.random_states import numpy_globals
from .utils.torchvision_schemas import import_torchvision_without_its_ops

# HistoryBuffer fills its class-level ``_statistics_methods`` with these on first instantiation.
BUILTIN_STATISTICS = ('min', 'max', 'current', 'mean')


def history_buffer_statistic(owner: Any, name: str) -> Callable:
    """``getattr`` as a Runner checkpoint uses it, and nothing more: a statistics method
    (``min``, ``max``, ``current``, ``mean`` or a registered one) of ``HistoryBuffer``."""
    allowed = set(BUILTIN_STATISTICS) | set(HistoryBuffer._statistics_methods)
    if (owner is HistoryBuffer or type(owner) is HistoryBuffer) and name in allowed:
        return getattr(owner, name)
    raise UnpicklingError(f'refused getattr({owner!r}, {name!r}) while loading a checkpoint: only '
                          f'HistoryBuffer statistics methods {sorted(allowed)} are allowed')


def empty_bytes(*args: Any) -> bytes:
    """``bytes`` as a Runner checkpoint uses it, and nothing more: numpy pickles the data of an
    empty array (an empty ``HistoryBuffer``'s history) as ``bytes()``; any argument is refused."""
    if args:
        raise UnpicklingError(f'refused bytes{args!r} while loading a checkpoint: only bytes() is '
                              'allowed')
    return b''


def runner_checkpoint_globals() -> List[Union[object, Tuple[Callable, str]]]:
    """What a Runner checkpoint needs beyond torch's default allowlist; ``getattr`` and ``bytes``
    map to restricted stand-ins."""
    stand_ins = [
        (function, f'{module}.{name}')
        for function, name in ((history_buffer_statistic, 'getattr'), (empty_bytes, 'bytes'))
        for module in ('__builtin__', 'builtins')
    ]
    return [HistoryBuffer, *numpy_globals(), *stand_ins]


def _half_on_cpu(arg: Any) -> bool:
    return isinstance(arg, torch.Tensor) and arg.device.type == 'cpu' and arg.dtype in HALF_DTYPES


def float32_on_cpu(function: Callable) -> Callable:
    """``function`` with its float16 / bfloat16 CPU tensor arguments upcast to float32, and its
    floating results (a tensor or a tuple of them) cast back to the first such argument's dtype."""
    def wrapped(*args, **kwargs):
        half = next((arg.dtype for arg in args if _half_on_cpu(arg)), None)
        if half is None:
            return function(*args, **kwargs)
        result = function(*(arg.float() if _half_on_cpu(arg) else arg for arg in args), **kwargs)
        if isinstance(result, tuple):
            return tuple(t.to(half) if t.is_floating_point() else t for t in result)
        return result.to(half)
    wrapped.float32_on_cpu = True
    return wrapped


def allow_half_mmcv_ops_on_cpu() -> None:
    """Install :func:`float32_on_cpu` around the ``nms`` that ``mmcv.ops.batched_nms`` looks up and
    around ``RoIAlign.forward`` (once)."""
    import importlib

    from mmcv.ops import RoIAlign
    # the module; ``mmcv.ops.nms`` names the function
    nms_module = importlib.import_module('mmcv.ops.nms')
    if not getattr(nms_module.nms, 'float32_on_cpu', False):
        nms_module.nms = float32_on_cpu(nms_module.nms)
    if not getattr(RoIAlign.forward, 'float32_on_cpu', False):
        RoIAlign.forward = float32_on_cpu(RoIAlign.forward)


def registered_statistics() -> List[Callable]:
    """The registered statistics a checkpoint names by module and name; the built-in ones go
    through ``getattr``."""
    return [method for name, method in HistoryBuffer._statistics_methods.items()
            if name not in BUILTIN_STATISTICS and '.' not in getattr(method, '__qualname__', '.')]


def allowing_registered_statistics(register: Callable) -> Callable:
    """``HistoryBuffer.register_statistics`` that also allows the method in torch's restricted
    loader (a Runner checkpoint pickles every registered statistic by name)."""
    @functools.wraps(register)
    def wrapped(cls: type, method: Callable) -> Callable:
        registered = register(cls, method)
        torch.serialization.add_safe_globals(registered_statistics())
        return registered
    wrapped.allows_checkpoints = True
    return wrapped


def allow_runner_checkpoints() -> None:
    """Let ``torch.load(..., weights_only=True)`` read mmengine Runner checkpoints: the message
    hub's ``HistoryBuffer`` types, every registered statistic and restricted stand-ins for
    ``getattr`` and ``bytes`` join torch's allowlist (upstream turns ``weights_only`` off, which
    lets any pickle run code)."""
    torch.serialization.add_safe_globals(runner_checkpoint_globals() + registered_statistics())
    register = HistoryBuffer.register_statistics
    if not getattr(register, 'allows_checkpoints', False):
        HistoryBuffer.register_statistics = classmethod(
            allowing_registered_statistics(register.__func__)
        )


def register_torch_hardsigmoid() -> None:
    """Make ``dict(type='Hardsigmoid')`` build ``torch.nn.Hardsigmoid`` (once)."""
    from mmengine.registry import MODELS
    if 'Hardsigmoid' not in MODELS.module_dict:
        MODELS.register_module(module=torch.nn.Hardsigmoid)


def register_flop_handles() -> None:
    """Add the project's FLOP handles to those mmengine's ``FlopAnalyzer`` starts with."""
    from mmengine.analysis import complexity_analysis

    from .utils.complexity import MMENGINE_FLOP_HANDLES
    for name, handle in MMENGINE_FLOP_HANDLES.items():
        complexity_analysis._DEFAULT_SUPPORTED_FLOP_OPS.setdefault(name, handle)


# mmdet 3.3's CocoDataset.parse_data_info skips these annotations without a word, in this order.
DROP_REASONS = {'outside': 'outside the image',
                'degenerate': 'degenerate (area <= 0 or a side under 1 px)',
                'unknown_category': 'of a category the dataset does not train',}


def drop_reason(annotation: dict, image: dict, category_ids) -> str:
    """Why ``CocoDataset.parse_data_info`` drops ``annotation`` of ``image``, '' when it keeps it
    (``ignore`` annotations are meant to be skipped and are not counted)."""
    if annotation.get('ignore', False):
        return ''
    x, y, w, h = annotation['bbox']
    inside_w = max(0, min(x + w, image['width']) - max(x, 0))
    inside_h = max(0, min(y + h, image['height']) - max(y, 0))
    if inside_w * inside_h == 0:
        return 'outside'
    if annotation['area'] <= 0 or w < 1 or h < 1:
        return 'degenerate'
    if annotation['category_id'] not in category_ids:
        return 'unknown_category'
    return ''


def count_dropped_annotations() -> None:
    """Make ``CocoDataset.parse_data_info`` count what it drops into the dataset's
    ``dropped_annotations`` (:data:`DROP_REASONS` keys and ``total``); parsing is unchanged."""
    from mmdet.datasets import CocoDataset

    parse = CocoDataset.parse_data_info
    if getattr(parse, 'counts_drops', False):
        return

    def parse_and_count(self, raw_data_info: dict):
        counter = self.__dict__.setdefault('dropped_annotations', Counter())
        image = raw_data_info['raw_img_info']
        for annotation in raw_data_info['raw_ann_info']:
            counter['total'] += 1
            reason = drop_reason(annotation, image, self.cat_ids)
            if reason:
                counter[reason] += 1
        return parse(self, raw_data_info)

    parse_and_count.counts_drops = True
    CocoDataset.parse_data_info = parse_and_count


def name_undecodable_label_maps() -> None:
    """Make mmseg's ``LoadAnnotations`` name the label map it cannot decode (PIL's error has no
    path), in the form :func:`mmvisattn.launch.checks.diagnose_failure` reads."""
    from mmseg.datasets.transforms import LoadAnnotations
    load = LoadAnnotations._load_seg_map
    if getattr(load, 'names_file', False):
        return

    def load_naming_file(self, results: dict) -> None:
        try:
            load(self, results)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise ValueError(f'failed to load image: {results["seg_map_path"]} '
                             f'({type(exc).__name__})') from exc

    load_naming_file.names_file = True
    LoadAnnotations._load_seg_map = load_naming_file


def remembered_metafiles(load: Callable) -> Callable:
    """mmengine's ``load`` as ``mmengine.config.utils`` uses it (metafiles, read only), each path
    parsed once."""
    parsed = functools.lru_cache(maxsize=None)(load)

    @functools.wraps(load)
    def wrapped(path, *args, **kwargs):
        return (
            parsed(path)
            if isinstance(path, str) and not args and not kwargs
            else load(path, *args, **kwargs)
        )

    wrapped.remembered = True
    return wrapped


def found_once_installed(is_installed: Callable[[str], bool]) -> Callable[[str], bool]:
    """``is_installed`` asking again only about packages it has not found yet."""
    found = set()

    @functools.wraps(is_installed)
    def wrapped(package: str) -> bool:
        if package not in found and is_installed(package):
            found.add(package)
        return package in found
    wrapped.remembered = True
    return wrapped


def remember_package_config_lookups() -> None:
    """``package::`` config names resolved without re-reading the metafiles at each name (once)."""
    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils
    if not getattr(config_utils.load, 'remembered', False):
        config_utils.load = remembered_metafiles(config_utils.load)
    if not getattr(config_module.is_installed, 'remembered', False):
        config_module.is_installed = found_once_installed(config_module.is_installed)


def formatted_once(format_code: Callable) -> Callable:
    """yapf's ``FormatCode`` as mmengine's config calls it, each (text, style) formatted once."""
    @functools.lru_cache(maxsize=32)
    def formatted(text: str, style: Tuple) -> Tuple[str, bool]:
        return format_code(text, style_config=dict(style))

    @functools.wraps(format_code)
    def wrapped(text: str, *args: Any, style_config: Any = None, **kwargs: Any) -> Tuple[str, bool]:
        if args or kwargs or not isinstance(style_config, dict):
            return format_code(text, *args, style_config=style_config, **kwargs)
        return formatted(text, tuple(sorted(style_config.items())))
    wrapped.remembered = True
    return wrapped


def format_each_config_once() -> None:
    """``Config.pretty_text`` formats a config once per process (a run formats it five times)."""
    from mmengine.config import config as config_module
    if not getattr(config_module.FormatCode, 'remembered', False):
        config_module.FormatCode = formatted_once(config_module.FormatCode)


def dropout_written_into_a_copy(init: Callable) -> Callable:
    """mmcv's ``MultiheadAttention.__init__`` writing the deprecated ``dropout=`` into a copy of
    ``dropout_layer``, never into the dict it was given."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapped(self, *args: Any, **kwargs: Any) -> None:
        if 'dropout' not in kwargs:
            return init(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        if isinstance(bound.arguments['dropout_layer'], dict):
            bound.arguments['dropout_layer'] = copy.deepcopy(bound.arguments['dropout_layer'])
        return init(*bound.args, **bound.kwargs)
    wrapped.copies_dropout_layer = True
    return wrapped


def keep_attention_dropout_defaults() -> None:
    """mmcv's ``MultiheadAttention`` leaves its default ``dropout_layer`` alone: the deprecated
    ``dropout=`` of mmdet's DETR configs was written into the shared default, and every later
    layer (mmseg's ViT) got the dropout."""
    from mmcv.cnn.bricks.transformer import MultiheadAttention
    if not getattr(MultiheadAttention.__init__, 'copies_dropout_layer', False):
        MultiheadAttention.__init__ = dropout_written_into_a_copy(MultiheadAttention.__init__)


def write_checkpoints_atomically() -> None:
    """Runner checkpoints written through a partial file renamed into place, and the one beyond
    ``max_keep_ckpts`` removed only after the new one and ``last_checkpoint``: a kill left a
    truncated file, or a ``last_checkpoint`` naming a removed one
    (:mod:`mmvisattn.utils.checkpoint`)."""
    from mmengine.hooks import CheckpointHook
    from mmengine.runner import runner as runner_module

    from .utils.checkpoint import atomic_save_checkpoint, replace_best_then_remove, save_then_prune
    if not getattr(runner_module.save_checkpoint, 'atomic', False):
        runner_module.save_checkpoint = atomic_save_checkpoint(runner_module.save_checkpoint)
    CheckpointHook._save_checkpoint_with_step = save_then_prune
    if not getattr(CheckpointHook._save_best_checkpoint, 'replaces_then_removes', False):
        CheckpointHook._save_best_checkpoint = replace_best_then_remove(
            CheckpointHook._save_best_checkpoint
        )


def plain_param_groups(build: Callable) -> Callable:
    """``build_optim_wrapper`` with plain-dict parameter groups: from a config they are
    ``ConfigDict`` s, which ``torch.compile``'s tracer of the optimizer step cannot read."""
    @functools.wraps(build)
    def built(*args: Any, **kwargs: Any) -> Any:
        wrapper = build(*args, **kwargs)
        wrapper.optimizer.param_groups[:] = [
            dict(group) for group in wrapper.optimizer.param_groups
        ]
        return wrapper
    built.plain_groups = True
    return built


def compile_optimizer_steps() -> None:
    """``compile=True`` optimizer steps traced whatever the config's groups (torch 2.13's Dynamo
    stops on a ``ConfigDict`` group)."""
    from mmengine.runner import runner as runner_module
    if not getattr(runner_module.build_optim_wrapper, 'plain_groups', False):
        runner_module.build_optim_wrapper = plain_param_groups(runner_module.build_optim_wrapper)


def metrics_dumped_by_the_main_process(after_test_epoch: Callable) -> Callable:
    """``LoggerHook.after_test_epoch`` whose metrics file only the main process writes."""
    from mmengine.dist import is_main_process
    from mmengine.hooks import logger_hook

    @functools.wraps(after_test_epoch)
    def wrapped(hook, runner, metrics=None) -> None:
        if is_main_process():
            return after_test_epoch(hook, runner, metrics)
        dump = logger_hook.dump
        logger_hook.dump = lambda *args, **kwargs: None
        try:
            return after_test_epoch(hook, runner, metrics)
        finally:
            logger_hook.dump = dump
    wrapped.main_process_dumps = True
    return wrapped


def dump_test_metrics_once() -> None:
    """The test metrics file written by the main process alone (two writers leave it unreadable)."""
    from mmengine.hooks import LoggerHook
    if not getattr(LoggerHook.after_test_epoch, 'main_process_dumps', False):
        LoggerHook.after_test_epoch = metrics_dumped_by_the_main_process(
            LoggerHook.after_test_epoch
        )


def torchscript_exporter_by_default(export: Callable) -> Callable:
    """``torch.onnx.export`` with ``dynamo=False`` unless the caller sets ``dynamo``."""
    @functools.wraps(export)
    def wrapped(*args, **kwargs):
        kwargs.setdefault('dynamo', False)
        return export(*args, **kwargs)
    wrapped.torchscript_by_default = True
    return wrapped


def export_onnx_with_torchscript() -> None:
    """``torch.onnx.export`` takes the TorchScript exporter unless asked otherwise: torch >= 2.9
    defaults to dynamo, which needs ``onnxscript`` and skips mmdeploy 1.3.1's rewriters."""
    if not getattr(torch.onnx.export, 'torchscript_by_default', False):
        torch.onnx.export = torchscript_exporter_by_default(torch.onnx.export)


def restore_onnx_cast_long() -> None:
    """``torch.onnx.symbolic_opset9._cast_Long``, gone from torch 2.13, which mmdeploy 1.3.1's
    RoIAlign translation imports (every two-stage detector): an ONNX ``Cast`` to int64."""
    # the backward-compatibility file, not the exporter's internal module of the same name
    symbolic_opset9 = importlib.import_module('torch.onnx.symbolic_opset9')
    if not hasattr(symbolic_opset9, '_cast_Long'):
        symbolic_opset9._cast_Long = _cast_long


def _cast_long(g, value, non_blocking):
    return g.op('Cast', value, to_i=torch._C._onnx.TensorProtoDataType.INT64)


# applied on import: the fixes (torchvision's first: mmdet imports mmpretrain, which imports it) and
# the additions
FIXES = (import_torchvision_without_its_ops, allow_runner_checkpoints,
         keep_attention_dropout_defaults, write_checkpoints_atomically, dump_test_metrics_once)
ADDITIONS = (register_torch_hardsigmoid, register_flop_handles)
# applied by the project's tools (apply_tool_patches), and by DroppedAnnotationsHook
TOOL_PATCHES = (allow_half_mmcv_ops_on_cpu, name_undecodable_label_maps,
                remember_package_config_lookups, format_each_config_once, compile_optimizer_steps)
HOOK_PATCHES = (count_dropped_annotations,)
# applied by mmvisattn.deploy.mmdeploy_support, which the project's mmdeploy deploy configs import
DEPLOY_PATCHES = (export_onnx_with_torchscript, restore_onnx_cast_long)
PATCHES = FIXES + ADDITIONS + TOOL_PATCHES + HOOK_PATCHES + DEPLOY_PATCHES


SKIP_VARIABLE = 'MMVISATTN_SKIP_PATCHES'
APPLIED: List[str] = []


def patches_left_out() -> List[str]:
    """The patch names ``$MMVISATTN_SKIP_PATCHES`` lists; an unknown name ends in one line."""
    names = [name.strip() for name in os.environ.get(SKIP_VARIABLE, '').split(',') if name.strip()]
    known = [patch.__name__ for patch in PATCHES]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f'error: {SKIP_VARIABLE} names {", ".join(unknown)}, which are not '
                         f'patches; expected names among {", ".join(known)}')
    return names


def patches_line() -> str:
    """What was applied and what left out, in one line."""
    left_out = patches_left_out()
    return (f'mmvisattn patched the pinned stack: {", ".join(APPLIED) or "nothing"}'
            + (f'; left out by {SKIP_VARIABLE}: {", ".join(left_out)}' if left_out else ''))


def apply(*patches: Callable) -> None:
    """Apply ``patches`` but those ``$MMVISATTN_SKIP_PATCHES`` leaves out (each once)."""
    left_out = patches_left_out()
    for patch in patches:
        if patch.__name__ not in left_out:
            patch()
            if patch.__name__ not in APPLIED:
                APPLIED.append(patch.__name__)


def apply_patches() -> None:
    """What ``import mmvisattn`` applies: :data:`FIXES` and :data:`ADDITIONS`, and log which."""
    apply(*FIXES, *ADDITIONS)
    logging.getLogger(__name__).info(patches_line())


def apply_tool_patches() -> None:
    """What the project's tools apply on top: :data:`TOOL_PATCHES`."""
    apply(*TOOL_PATCHES)
