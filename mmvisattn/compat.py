"""Every patch ``import mmvisattn`` applies to the pinned stack (:data:`PATCHES`, applied once by
:func:`apply_patches`; the patch table of docs/advanced/compat.md says what each changes, why, and
how to check it is still needed). Nothing else in the package changes another library's code.

The environment variable ``MMVISATTN_SKIP_PATCHES`` (patch names, comma-separated) leaves patches
out; :data:`APPLIED` holds the names applied, which :func:`patches_line` puts in one log line (every
run of ``tools/train.py`` and ``tools/test.py`` logs it); a hook that needs a patch left out ends
in one line.

Runner checkpoints (weights_only). Since torch 2.6 ``torch.load`` defaults to
``weights_only=True`` and mmengine 0.10.7 calls it without the argument, so every checkpoint the
Runner saves fails to load for ``--resume``, ``load_from`` and ``tools/test.py``: the message hub
stores ``HistoryBuffer`` objects holding numpy arrays and scalars, and each buffer pickles its
statistics methods as ``getattr(HistoryBuffer, 'mean')`` (and an empty buffer's history as
``bytes()``). Upstream's proposed fix turns ``weights_only`` off, which lets any pickle run code.
Instead the few types a Runner checkpoint contains are added to torch's allowlist, and the
``getattr`` and ``bytes`` globals are bound to stand-ins that only return HistoryBuffer's
registered statistics methods and ``b''``: loading stays restricted, and a pickle that would call
anything else is refused before it runs.

mmcv's CPU ops under autocast. mmcv 2.1.0's CPU ``nms`` and ``RoIAlign`` kernels take float32 only;
under CPU autocast (``tools/train.py --amp`` on a machine without CUDA) a two-stage detector hands
them bfloat16 and training stops ("expected scalar type Float but found BFloat16", "ROIAlign_forward
not implemented for 'BFloat16'"). Both are wrapped to upcast half CPU inputs; CUDA inputs, which
the CUDA kernels take in half precision, pass through unchanged.

torch's ``nn.Hardsigmoid`` in mmengine's ``MODELS``. mmcv's own ``HSigmoid`` warns on every
construction about a default it changed in 2021; torch's hard sigmoid is the same function
(``relu6(x + 3) / 6``, the SE gate of PicoDet's ESNet) and is registered the way mmcv registers
torch's other activations.

mmengine's FLOP counter. ``get_model_complexity_info`` (what mmdet's and mmseg's ``get_flops.py``
call) counts by jit handles and has none for SDPA or the linear solve of random-walk attention, so
their work went uncounted; the handles of :data:`mmvisattn.utils.complexity.MMENGINE_FLOP_HANDLES`
are added to its defaults (the stock handles stay as they are).

mmdet's dropped annotations. ``CocoDataset.parse_data_info`` skips boxes outside the image,
degenerate boxes and unknown categories without a word; it is wrapped to count them, which
``DroppedAnnotationsHook`` reports.

mmengine's checkpoints. ``CheckpointHook`` removes the checkpoint beyond ``max_keep_ckpts`` before it
writes the new one, and the writer opens the final file directly: a kill in between left no
checkpoint while ``last_checkpoint`` named a removed one, a kill during the write a truncated file.
The writer goes through a partial file renamed into place, and the hook removes the old checkpoint
only once the new one and ``last_checkpoint`` are written
(:func:`mmvisattn.utils.checkpoint.save_then_prune`). ``save_best`` had the same order (the previous
best removed before the new one was written); it removes the previous best after
(:func:`mmvisattn.utils.checkpoint.replace_best_then_remove`).

mmengine's ``package::`` config lookups. A config whose ``_base_`` names ``mmdet::...`` or
``mmseg::...`` costs each such name a reload of ``pkg_resources`` (``is_installed``) and a parse of
every ``metafile.yml`` the package lists (over 200 for mmdet), about a second a name: most of a
config's loading time, paid again by every tool a run starts. The metafiles are parsed once per
process, and a package found installed stays found (the reload is there for packages installed
while a process runs, which can only turn a "not installed" into "installed").

mmengine's test metrics file. ``LoggerHook.after_test_epoch`` dumps the metrics to
``<timestamp>.json`` in the run's log folder from every rank; the ranks share the folder, and two
writers truncating and writing one file leave it unreadable now and then (``{...}}`` where one
rank's line was a character longer). Ranks other than 0 log the metrics without writing the file.

mmengine's config formatting. ``Config.pretty_text`` formats the whole config with yapf, whose line
splitting searches (about a second for a detector's config on a CPU core), and a training run reads
it four times before its first iteration (its log, the message hub, the dumped config, the
visualiser's copy) and once more for every checkpoint it saves. yapf's answer for a text is
remembered, so each distinct config text is formatted once per process (the text is the same).

mmcv's ``MultiheadAttention`` defaults. Given the deprecated ``dropout=`` (every DETR-family config of
mmdet, SMCA's), ``MultiheadAttention.__init__`` writes it into ``dropout_layer``, which is its
default dict when the caller gave none: every ``MultiheadAttention`` built later in the process
without a ``dropout_layer`` (mmseg's ViT layers, Castling-ViT's, DeiT-Ripple's) got that dropout on
its residual instead of none. Such a call gets a copy of the dict to write into.

torchvision without its compiled ops. mmpretrain imports torchvision, whose PyPI wheels for x86_64
are CUDA builds: beside a CPU torch (this project's 2.13.0) their ``_C`` library does not load, and
torchvision 0.28 then fails to import at all ("operator torchvision::nms does not exist"), because
its ``_meta_registrations`` registers fake kernels for ``nms`` and ``qnms`` without checking that
the ops exist (its other registrations check). mmdet's and mmseg's models import mmpretrain when it
is installed, so nothing of the stack imported. Where the library does not load, the two schemas are
defined (no kernel behind them): torchvision imports, its transforms (pure PyTorch, all mmpretrain's
pipelines use) work, and a call of a compiled op still fails with torchvision's own "Couldn't load
custom C++ ops". Applied before anything imports torchvision (``import mmvisattn`` applies the
patches first).

mmseg's undecodable label maps. ``LoadAnnotations`` reports PIL's "cannot identify image file
<_io.BytesIO ...>" without the path; it is wrapped to name the file.
"""
import copy
import functools
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import sys
from collections import Counter
from pickle import UnpicklingError
from typing import Any, Callable, List, Optional, Tuple, Union

import torch
from mmengine.logging.history_buffer import HistoryBuffer

from .ops.utils.amp import HALF_DTYPES
from .utils.random_states import numpy_globals


# HistoryBuffer fills its class-level ``_statistics_methods`` with these on first instantiation.
BUILTIN_STATISTICS = ('min', 'max', 'current', 'mean')


def history_buffer_statistic(owner: Any, name: str) -> Callable:
    """``getattr`` as a Runner checkpoint uses it, and nothing more: a statistics method
    (``min``, ``max``, ``current``, ``mean`` or a registered one) of ``HistoryBuffer``."""
    allowed = set(BUILTIN_STATISTICS) | set(HistoryBuffer._statistics_methods)
    if (owner is HistoryBuffer or type(owner) is HistoryBuffer) and name in allowed:
        return getattr(owner, name)
    raise UnpicklingError(f'refused getattr({owner!r}, {name!r}) while loading a checkpoint: only HistoryBuffer '
                          f'statistics methods {sorted(allowed)} are allowed')


def empty_bytes(*args: Any) -> bytes:
    """``bytes`` as a Runner checkpoint uses it, and nothing more: numpy pickles the data of an
    empty array (an empty ``HistoryBuffer``'s history) as ``bytes()``; any argument is refused."""
    if args:
        raise UnpicklingError(f'refused bytes{args!r} while loading a checkpoint: only bytes() is allowed')
    return b''


def runner_checkpoint_globals() -> List[Union[object, Tuple[Callable, str]]]:
    """Everything outside torch's default allowlist that an mmengine Runner checkpoint refers to;
    ``getattr`` and ``bytes`` (pickled as ``__builtin__.*`` by protocol 2) map to restricted stand-ins."""
    stand_ins = [(function, f'{module}.{name}') for function, name in ((history_buffer_statistic, 'getattr'),
                                                                       (empty_bytes, 'bytes'))
                 for module in ('__builtin__', 'builtins')]
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
    nms_module = importlib.import_module('mmcv.ops.nms')  # the module; ``mmcv.ops.nms`` names the function
    if not getattr(nms_module.nms, 'float32_on_cpu', False):
        nms_module.nms = float32_on_cpu(nms_module.nms)
    if not getattr(RoIAlign.forward, 'float32_on_cpu', False):
        RoIAlign.forward = float32_on_cpu(RoIAlign.forward)


def allow_runner_checkpoints() -> None:
    """Let ``torch.load(..., weights_only=True)`` read mmengine Runner checkpoints."""
    torch.serialization.add_safe_globals(runner_checkpoint_globals())


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


def count_dropped_annotations() -> None:
    """Make ``CocoDataset.parse_data_info`` count what it drops into the dataset's
    ``dropped_annotations`` (a Counter of the ``DROP_REASONS`` keys of
    :mod:`mmvisattn.engine.hooks.dropped_annotations_hook`, plus ``total``), which
    ``DroppedAnnotationsHook`` reports. The parsing itself is unchanged."""
    from mmdet.datasets import CocoDataset

    from .engine.hooks.dropped_annotations_hook import drop_reason
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
    """Make mmseg's ``LoadAnnotations`` name a label map it cannot decode. It reports PIL's
    "cannot identify image file <_io.BytesIO ...>" without the path; the failure is re-raised in
    the form mmcv's ``LoadImageFromFile`` uses for images, which
    :func:`mmvisattn.launch.checks.diagnose_failure` reads. A missing file keeps its own error."""
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
            raise ValueError(f'failed to load image: {results["seg_map_path"]} ({type(exc).__name__})') from exc

    load_naming_file.names_file = True
    LoadAnnotations._load_seg_map = load_naming_file


def remembered_metafiles(load: Callable) -> Callable:
    """mmengine's ``load`` as ``mmengine.config.utils`` uses it (a package's model index and the
    metafiles it lists, read, never changed), each path parsed once."""
    parsed = functools.lru_cache(maxsize=None)(load)

    @functools.wraps(load)
    def wrapped(path, *args, **kwargs):
        return parsed(path) if isinstance(path, str) and not args and not kwargs else load(path, *args, **kwargs)
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
    """``package::`` config names resolved without re-reading the package's metafiles and reloading
    ``pkg_resources`` at each name (once)."""
    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils
    if not getattr(config_utils.load, 'remembered', False):
        config_utils.load = remembered_metafiles(config_utils.load)
    if not getattr(config_module.is_installed, 'remembered', False):
        config_module.is_installed = found_once_installed(config_module.is_installed)


def formatted_once(format_code: Callable) -> Callable:
    """yapf's ``FormatCode`` as mmengine's config module calls it (a text and a style dict), each
    (text, style) formatted once; any other call goes to yapf as it is."""
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
    """``Config.pretty_text`` formats a config text once per process (see the module docstring)."""
    from mmengine.config import config as config_module
    if not getattr(config_module.FormatCode, 'remembered', False):
        config_module.FormatCode = formatted_once(config_module.FormatCode)


def dropout_written_into_a_copy(init: Callable) -> Callable:
    """mmcv's ``MultiheadAttention.__init__`` whose deprecated ``dropout=`` is written into a copy of
    ``dropout_layer`` (its default dict, or the caller's), never into the dict it was given."""
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
    """mmcv's ``MultiheadAttention`` leaves its default ``dropout_layer`` as it is (see the module docstring)."""
    from mmcv.cnn.bricks.transformer import MultiheadAttention
    if not getattr(MultiheadAttention.__init__, 'copies_dropout_layer', False):
        MultiheadAttention.__init__ = dropout_written_into_a_copy(MultiheadAttention.__init__)


def write_checkpoints_atomically() -> None:
    """Runner checkpoints written through a partial file, and the expired one removed after the new
    one (see the module docstring)."""
    from mmengine.hooks import CheckpointHook
    from mmengine.runner import runner as runner_module

    from .utils.checkpoint import atomic_save_checkpoint, replace_best_then_remove, save_then_prune
    if not getattr(runner_module.save_checkpoint, 'atomic', False):
        runner_module.save_checkpoint = atomic_save_checkpoint(runner_module.save_checkpoint)
    CheckpointHook._save_checkpoint_with_step = save_then_prune
    if not getattr(CheckpointHook._save_best_checkpoint, 'replaces_then_removes', False):
        CheckpointHook._save_best_checkpoint = replace_best_then_remove(CheckpointHook._save_best_checkpoint)


def metrics_dumped_by_rank_0(after_test_epoch: Callable) -> Callable:
    """``LoggerHook.after_test_epoch`` whose metrics file only rank 0 writes (the others log only)."""
    from mmengine.hooks import logger_hook

    @functools.wraps(after_test_epoch)
    def wrapped(hook, runner, metrics=None) -> None:
        if runner.rank == 0:
            return after_test_epoch(hook, runner, metrics)
        dump = logger_hook.dump
        logger_hook.dump = lambda *args, **kwargs: None
        try:
            return after_test_epoch(hook, runner, metrics)
        finally:
            logger_hook.dump = dump
    wrapped.rank_0_dumps = True
    return wrapped


def dump_test_metrics_once() -> None:
    """The test metrics file written by rank 0 alone (see the module docstring)."""
    from mmengine.hooks import LoggerHook
    if not getattr(LoggerHook.after_test_epoch, 'rank_0_dumps', False):
        LoggerHook.after_test_epoch = metrics_dumped_by_rank_0(LoggerHook.after_test_epoch)


# the ops whose fake kernels torchvision 0.28 registers whether or not its library loaded
TORCHVISION_UNCHECKED_OPS = ('nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor',
                             'qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')
_TORCHVISION_SCHEMAS: List[torch.library.Library] = []  # kept alive: a dropped Library removes its ops


def torchvision_library() -> Optional[str]:
    """The path of torchvision's compiled ``_C`` library, or ``None`` without torchvision (or without one)."""
    spec = importlib.util.find_spec('torchvision')
    if spec is None or not spec.submodule_search_locations:
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(spec.submodule_search_locations[0], '_C' + suffix)
        if os.path.isfile(path):
            return path
    return None


def import_torchvision_without_its_ops() -> None:
    """Define the ops torchvision registers unchecked where its library does not load (see the
    module docstring); nothing where it loads or torchvision is already imported."""
    if 'torchvision' in sys.modules or _TORCHVISION_SCHEMAS:
        return
    path = torchvision_library()
    if path is None:
        return
    try:
        torch.ops.load_library(path)  # what torchvision's import does first; it loads once per process
        return
    except (OSError, RuntimeError):
        pass
    library = torch.library.Library('torchvision', 'FRAGMENT')
    for schema in TORCHVISION_UNCHECKED_OPS:
        library.define(schema)
    _TORCHVISION_SCHEMAS.append(library)


PATCHES = (import_torchvision_without_its_ops, allow_runner_checkpoints, allow_half_mmcv_ops_on_cpu,
           register_torch_hardsigmoid, register_flop_handles, count_dropped_annotations, name_undecodable_label_maps,
           write_checkpoints_atomically, remember_package_config_lookups, format_each_config_once,
           keep_attention_dropout_defaults, dump_test_metrics_once)


SKIP_VARIABLE = 'MMVISATTN_SKIP_PATCHES'
APPLIED: List[str] = []


def patches_left_out() -> List[str]:
    """The patch names ``$MMVISATTN_SKIP_PATCHES`` lists; a name that is no patch ends in one line."""
    names = [name.strip() for name in os.environ.get(SKIP_VARIABLE, '').split(',') if name.strip()]
    known = [patch.__name__ for patch in PATCHES]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f'error: {SKIP_VARIABLE} names {", ".join(unknown)}, which are not patches; expected '
                         f'names among {", ".join(known)}')
    return names


def patches_line() -> str:
    """What was applied and what left out, in one line."""
    left_out = [patch.__name__ for patch in PATCHES if patch.__name__ not in APPLIED]
    return (f'mmvisattn patched the pinned stack: {", ".join(APPLIED) or "nothing"}'
            + (f'; left out by {SKIP_VARIABLE}: {", ".join(left_out)}' if left_out else ''))


def apply_patches() -> None:
    """Apply :data:`PATCHES` but those ``$MMVISATTN_SKIP_PATCHES`` leaves out (each one applies itself
    once), and log which."""
    left_out = patches_left_out()
    for patch in PATCHES:
        if patch.__name__ not in left_out:
            patch()
            if patch.__name__ not in APPLIED:
                APPLIED.append(patch.__name__)
    logging.getLogger(__name__).info(patches_line())
