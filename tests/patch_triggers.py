"""For each patch of ``mmvisattn.compat``, the model, input or tool that needs it, run as a user
would: :data:`TRIGGERS` maps a patch's name to a function that returns ``'ok'`` or what went wrong.
``tests/test_compat.py`` runs them all in a process that leaves every patch out
(``MMVISATTN_SKIP_PATCHES``) and in its own, patched: each must go wrong without its patch and not
with it, so each patch shows it is still needed.

``import_torchvision_without_its_ops`` is needed before anything of the stack imports (mmdet's
models import mmpretrain, which imports torchvision): its trigger is a process of its own with the
environment as given, and the script's own process keeps that patch to import mmvisattn for the
other triggers.

    MMVISATTN_SKIP_PATCHES=... python tests/patch_triggers.py FOLDER   # prints {name: outcome} as
    JSON
"""
import builtins
import errno
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch

TORCHVISION_PATCH = 'import_torchvision_without_its_ops'
SKIP_VARIABLE = 'MMVISATTN_SKIP_PATCHES'


def stack_imports(folder: Path) -> str:
    """``import mmvisattn`` (mmdet's models, hence mmpretrain and torchvision) and torchvision's
    transforms, in a fresh process with this process's environment."""
    done = subprocess.run([sys.executable, '-c', 'import mmvisattn, torchvision.transforms'],
                          capture_output=True, text=True, timeout=300, cwd=folder)
    return 'ok' if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def runner_checkpoint_loads(folder: Path) -> str:
    """A Runner checkpoint (its message hub holds HistoryBuffers) read with torch's default
    ``weights_only=True``, as ``--resume`` and ``tools/test.py`` read it."""
    from mmengine.logging import MessageHub
    hub = MessageHub.get_instance('patch-trigger')
    hub.update_scalar('train/loss', 1.0)
    torch.save({'message_hub': hub.state_dict(), 'state_dict': {}}, folder / 'runner.pth')
    try:
        torch.load(folder / 'runner.pth')
    except Exception as error:
        return f'{type(error).__name__}: {str(error).splitlines()[0]}'
    return 'ok'


def half_nms_on_cpu(folder: Path) -> str:
    """mmcv's ``batched_nms`` on bfloat16 CPU boxes, as a detector's test step under CPU
    autocast."""
    from mmcv.ops import batched_nms
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]], dtype=torch.bfloat16)
    scores = torch.tensor([0.9, 0.8], dtype=torch.bfloat16)
    try:
        batched_nms(boxes, scores, torch.zeros(2, dtype=torch.long),
                    dict(type='nms', iou_threshold=0.5))
    except RuntimeError as error:
        return f'RuntimeError: {str(error).splitlines()[0]}'
    return 'ok'


def hardsigmoid_builds(folder: Path) -> str:
    """``dict(type='Hardsigmoid')``, the SE gate of PicoDet's ESNet."""
    from mmengine.registry import MODELS
    try:
        MODELS.build(dict(type='Hardsigmoid'))
    except KeyError as error:
        return f'KeyError: {error}'
    return 'ok'


def sdpa_flops_counted(folder: Path) -> str:
    """mmengine's FLOP counter (what get_flops.py calls) on a module that calls SDPA."""
    from mmengine.analysis import FlopAnalyzer

    class Attention(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.scaled_dot_product_attention(x, x, x)

    flops = FlopAnalyzer(Attention(), (torch.randn(1, 2, 16, 8),))
    flops.unsupported_ops_warnings(False)
    flops.uncalled_modules_warnings(False)
    return 'ok' if flops.total() > 0 else 'SDPA counted as 0 FLOPs'


def dropped_annotations_reported(folder: Path) -> str:
    """DroppedAnnotationsHook built for a run: it reports what the patched parser counts."""
    from mmvisattn.engine.hooks import DroppedAnnotationsHook
    try:
        DroppedAnnotationsHook()
    except SystemExit as exit:
        return str(exit)
    return 'ok'


def broken_label_map_named(folder: Path) -> str:
    """mmseg's ``LoadAnnotations`` on a label map that does not decode: is the file named?"""
    from mmseg.datasets.transforms import LoadAnnotations
    path = folder / 'broken_labelTrainIds.png'
    path.write_bytes(b'not a png')
    try:
        LoadAnnotations()(dict(seg_map_path=str(path), reduce_zero_label=False, seg_fields=[]))
    except Exception as error:
        return (
            'ok' if str(path) in str(error) else f'{type(error).__name__} without the path: {error}'
        )
    return 'decoded'


class FullDisk:
    """A file whose first write stops half-way on a full disk."""

    def __init__(self, file) -> None:
        self.file = file

    def write(self, data) -> int:
        self.file.write(bytes(data)[:len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, 'No space left on device')

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> 'FullDisk':
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def interrupted_checkpoint_write(folder: Path) -> str:
    """mmengine's ``save_checkpoint`` (as the Runner calls it) on a disk that fills up half-way:
    what is left at the checkpoint's path?"""
    from mmengine.runner import runner as runner_module
    path, real_open = folder / 'iter_1.pth', builtins.open

    def filling_open(file, mode='r', *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        return FullDisk(opened) if 'w' in mode and str(folder) in str(file) else opened

    builtins.open = filling_open
    try:
        runner_module.save_checkpoint({'weights': torch.zeros(1000)}, str(path))
    except OSError:
        pass
    finally:
        builtins.open = real_open
    return (
        'ok'
        if not path.exists()
        else f'a truncated file of {path.stat().st_size} bytes at {path.name}'
    )


def metafiles_parsed_once(folder: Path) -> str:
    """A config whose bases name ``mmdet::``, loaded a second time: are mmdet's metafiles parsed
    again?"""
    from mmengine.config import Config
    from mmengine.fileio.handlers import YamlHandler
    parse, parsed = YamlHandler.load_from_fileobj, []

    def counted(handler, file, **kwargs):
        parsed.append(1)
        return parse(handler, file, **kwargs)

    config = Path(__file__).parents[1] / 'configs/vil/retinanet_vil-tiny_fpn_1x_coco.py'
    Config.fromfile(config)
    YamlHandler.load_from_fileobj = counted
    try:
        Config.fromfile(config)
    finally:
        YamlHandler.load_from_fileobj = parse
    return 'ok' if not parsed else f'{len(parsed)} YAML files parsed again'


def config_formatted_once(folder: Path) -> str:
    """A config's text read twice, as a Runner reads it before its first iteration (its log, then
    the message hub): does yapf format it twice?"""
    from mmengine.config import Config
    from yapf.yapflib import yapf_api
    # a text no earlier call formatted
    config = Config(dict(model=dict(type='RetinaNet', name=str(folder))))
    format_tree, formatted = yapf_api.FormatTree, []

    def counted(*args, **kwargs):
        formatted.append(1)
        return format_tree(*args, **kwargs)
    yapf_api.FormatTree = counted
    try:
        first, second = config.pretty_text, config.pretty_text
    finally:
        yapf_api.FormatTree = format_tree
    if first != second:
        return 'the config read twice gave two texts'
    return 'ok' if len(formatted) == 1 else f'the config formatted {len(formatted)} times'


def attention_dropout_after_a_detr_config(folder: Path) -> str:
    """mmcv's MultiheadAttention built as the DETR-family configs build it (``dropout=0.1``), then
    one with its defaults, as mmseg's ViT layers build theirs: does the second drop its residual?"""
    from mmcv.cnn.bricks.transformer import MultiheadAttention
    MultiheadAttention(8, 2, dropout=0.1)
    residual = MultiheadAttention(8, 2).dropout_layer
    return 'ok' if residual.p == 0.0 else f'a default MultiheadAttention built with {residual}'


def test_metrics_file_of_rank_1(folder: Path) -> str:
    """LoggerHook at the end of a distributed test, on rank 1: does it write the shared metrics
    file?"""
    from types import SimpleNamespace

    from mmengine.dist import utils as dist_utils
    from mmengine.hooks import LoggerHook
    hook = LoggerHook()
    hook.json_log_path = 'metrics.json'
    runner = SimpleNamespace(
        log_dir=str(folder),
        test_dataloader=[0],
        logger=SimpleNamespace(info=lambda line: None),
        log_processor=SimpleNamespace(get_log_after_epoch=lambda *args, **kwargs: ({}, '')),
    )
    get_rank, dist_utils.get_rank = dist_utils.get_rank, lambda group=None: 1
    try:
        hook.after_test_epoch(runner, {})
    finally:
        dist_utils.get_rank = get_rank
    return 'ok' if not (folder / 'metrics.json').exists() else 'rank 1 wrote the metrics file'


def onnx_export_as_mmdeploy_calls_it(folder: Path) -> str:
    """``torch.onnx.export`` without ``dynamo=``, as mmdeploy 1.3.1 calls it: does it reach for
    onnxscript?"""
    try:
        torch.onnx.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), str(folder / 'linear.onnx'))
    except ModuleNotFoundError as error:
        return f'ModuleNotFoundError: {error}'
    return 'ok'


def roi_align_as_mmdeploy_exports_it(folder: Path) -> str:
    """mmdeploy 1.3.1's RoIAlign translation for ONNX Runtime imports ``_cast_Long``: is it
    there?"""
    try:
        from torch.onnx.symbolic_opset9 import _cast_Long  # noqa: F401
    except ImportError as error:
        return f'ImportError: {error}'
    return 'ok'


def compiled_step_with_paramwise_groups(folder: Path) -> str:
    """The optimizer step, compiled as ``compile=True`` compiles it, of an optimizer the Runner
    built from a config with ``paramwise_cfg``: does Dynamo trace it?"""
    from mmengine.config import ConfigDict
    from mmengine.runner import runner as runner_module
    model = torch.nn.Linear(2, 2)
    wrapper = runner_module.build_optim_wrapper(model, ConfigDict(
        optimizer=dict(type='AdamW', lr=0.1, weight_decay=0.05),
        paramwise_cfg=dict(bias_decay_mult=0.0)))
    model(torch.randn(3, 2)).sum().backward()
    try:
        torch.compile(wrapper.optimizer.step, backend='eager')()
    except Exception as error:  # Dynamo's internal errors have no common class but Exception
        return f'{type(error).__name__}: {error}'.splitlines()[0]
    return 'ok'


TRIGGERS: Dict[str, Callable[[Path], str]] = dict(
    import_torchvision_without_its_ops=stack_imports,
    allow_runner_checkpoints=runner_checkpoint_loads, allow_half_mmcv_ops_on_cpu=half_nms_on_cpu,
    register_torch_hardsigmoid=hardsigmoid_builds, register_flop_handles=sdpa_flops_counted,
    count_dropped_annotations=dropped_annotations_reported,
    name_undecodable_label_maps=broken_label_map_named,
    write_checkpoints_atomically=interrupted_checkpoint_write,
    remember_package_config_lookups=metafiles_parsed_once,
    format_each_config_once=config_formatted_once,
    compile_optimizer_steps=compiled_step_with_paramwise_groups,
    keep_attention_dropout_defaults=attention_dropout_after_a_detr_config,
    dump_test_metrics_once=test_metrics_file_of_rank_1,
    export_onnx_with_torchscript=onnx_export_as_mmdeploy_calls_it,
    restore_onnx_cast_long=roi_align_as_mmdeploy_exports_it)


def outcomes(folder: Path, skip: Tuple[str, ...] = ()) -> Dict[str, str]:
    """Every trigger's outcome but those of ``skip``, each in a folder of its own under
    ``folder``."""
    results = {}
    for name, trigger in TRIGGERS.items():
        if name in skip:
            continue
        (folder / name).mkdir()
        results[name] = trigger(folder / name)
    return results


def keep_torchvision_patch() -> None:
    """This process imports mmvisattn with the torchvision patch whatever the environment leaves out
    (the trigger of that patch, a child process, sees the environment as given)."""
    skipped = [name for name in os.environ.get(SKIP_VARIABLE, '').split(',')
               if name.strip() != TORCHVISION_PATCH]
    os.environ[SKIP_VARIABLE] = ','.join(skipped)


if __name__ == '__main__':
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    (folder / TORCHVISION_PATCH).mkdir()
    results = {TORCHVISION_PATCH: stack_imports(folder / TORCHVISION_PATCH)}
    keep_torchvision_patch()
    import mmvisattn  # noqa: F401,E402  (applies the patches the environment leaves in)
    mmvisattn.compat.apply_tool_patches()  # as the project's tools do
    # as mmvisattn.deploy.mmdeploy_support does
    mmvisattn.compat.apply(*mmvisattn.compat.DEPLOY_PATCHES)
    results.update(outcomes(folder, skip=(TORCHVISION_PATCH,)))
    print(json.dumps(results))
