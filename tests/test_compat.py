"""Runner checkpoints load under torch's weights_only loader through an allowlist; anything that
would execute a callable is still refused, and the callable does not run."""
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner, load_checkpoint

import mmvisattn  # noqa: F401  (applies the allowlist)
from mmvisattn.compat import PATCHES, SKIP_VARIABLE, history_buffer_statistic, patches_line, runner_checkpoint_globals

from .conftest import REPO, run_command, tool_env
from .patch_triggers import TRIGGERS


class ToyModel(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, targets=None, mode='tensor'):
        out = self.linear(inputs)
        if mode == 'loss':
            return dict(loss=((out.squeeze(-1) - targets) ** 2).mean())
        return out


class ToyDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, index):
        return dict(inputs=torch.full((2,), float(index)), targets=torch.tensor(float(index % 3)))


def toy_runner(work_dir: Path, max_iters: int, resume: bool = False) -> Runner:
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), sampler=dict(type='InfiniteSampler'), batch_size=4,
                              num_workers=0, collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False)),
        randomness=dict(seed=0), resume=resume, default_scope='mmengine')


def test_runner_checkpoint_resumes(tmp_path):
    toy_runner(tmp_path, max_iters=2).train()
    checkpoint = torch.load(tmp_path / 'iter_2.pth')  # weights_only is torch's default
    assert checkpoint['meta']['iter'] == 2
    assert checkpoint['message_hub']['log_scalars']
    runner = toy_runner(tmp_path, max_iters=4, resume=True)
    runner.train()
    assert runner.iter == 4
    assert 'Advance dataloader 2 steps' in (tmp_path / runner.timestamp / f'{runner.timestamp}.log').read_text()


def test_mmengine_load_checkpoint_reads_runner_checkpoint(tmp_path):
    toy_runner(tmp_path, max_iters=2).train()
    model = ToyModel()
    load_checkpoint(model, str(tmp_path / 'iter_2.pth'))


class Exploit:
    """Unpickling this calls ``Path.touch`` on a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def test_malicious_checkpoint_is_refused_and_does_not_run(tmp_path):
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'meta': Exploit(marker)}, path)
    with pytest.raises(pickle.UnpicklingError, match='Weights only load failed'):
        torch.load(path)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(ToyModel(), str(path))
    assert not marker.exists()


def test_allowlist_is_exactly_the_runner_types():
    entries = runner_checkpoint_globals()
    classes = [obj for obj in entries if not isinstance(obj, tuple)]
    names = {f'{obj.__module__}.{obj.__name__}' for obj in classes}
    assert 'mmengine.logging.history_buffer.HistoryBuffer' in names
    assert all(name.split('.')[0] in ('numpy', 'mmengine') for name in names), names
    assert {name for _, name in (e for e in entries if isinstance(e, tuple))} == {
        '__builtin__.getattr', 'builtins.getattr', '__builtin__.bytes', 'builtins.bytes'}
    safe = torch.serialization.get_safe_globals()
    assert all(entry in safe for entry in entries)


class GetattrExploit:
    """Unpickling this would reach ``os.system`` through ``getattr`` on an allowlisted object."""

    def __reduce__(self):
        return getattr, (HistoryBuffer, '__init__')


def test_getattr_is_limited_to_history_buffer_statistics(tmp_path):
    path = tmp_path / 'evil.pth'
    torch.save({'meta': GetattrExploit()}, path)
    with pytest.raises(pickle.UnpicklingError, match="refused getattr.*'__init__'"):
        torch.load(path)
    assert history_buffer_statistic(HistoryBuffer, 'mean') is HistoryBuffer.mean


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_mmcv_cpu_ops_take_half_inputs(dtype):
    """mmcv's CPU nms (through batched_nms, as mmdet's RPN calls it) and RoIAlign take float32 only;
    the shims run half inputs in float32 and return the input's dtype."""
    from mmcv.ops import RoIAlign, batched_nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]], dtype=dtype)
    scores = torch.tensor([0.9, 0.8, 0.7], dtype=dtype)
    dets, keep = batched_nms(boxes, scores, torch.zeros(3, dtype=torch.long), dict(type='nms', iou_threshold=0.5))
    assert keep.tolist() == [0, 2] and dets.dtype == dtype
    feats = torch.arange(64.).view(1, 1, 8, 8).to(dtype).requires_grad_(True)
    rois = torch.tensor([[0., 0., 0., 4., 4.]], dtype=dtype)
    out = RoIAlign((2, 2), spatial_scale=1.0, sampling_ratio=1)(feats, rois)
    assert out.dtype == dtype and out.shape == (1, 1, 2, 2)
    out.float().sum().backward()
    assert feats.grad.dtype == dtype and feats.grad.sum().item() == pytest.approx(4.0)


def test_empty_history_buffer_loads(tmp_path):
    """An empty buffer pickles its history as ``bytes()``, which the stand-in allows."""
    path = tmp_path / 'meta.pth'
    torch.save({'meta': {'buffer': HistoryBuffer()}}, path)
    assert len(torch.load(path)['meta']['buffer']._log_history) == 0


class BytesExploit:
    def __reduce__(self):
        return bytes, (10 ** 6,)


def test_bytes_is_limited_to_the_empty_call(tmp_path):
    path = tmp_path / 'evil.pth'
    torch.save({'meta': BytesExploit()}, path)
    with pytest.raises(pickle.UnpicklingError, match=r'refused bytes\(1000000,\)'):
        torch.load(path)


def test_the_patch_table_lists_every_patch():
    """Every function of ``compat.PATCHES`` has a row in the docs' patch table, and every row a function."""
    from mmvisattn.compat import PATCHES
    readme = (Path(__file__).resolve().parents[1] / 'docs/advanced/compat.md').read_text()
    table = readme[readme.index('| patch (`mmvisattn/compat.py`) |'):].split('\n\n')[0]
    rows = {line.split('|')[1].strip().strip('`') for line in table.splitlines()[2:]}
    assert rows == {patch.__name__ for patch in PATCHES}


def test_no_module_but_compat_patches_another_library():
    """An assignment to an attribute of an imported class or module (``CocoDataset.x = ...``) happens
    only in compat.py (``sys``'s streams and arguments are the interpreter's, not a library's code:
    the tool server sets them for each run it starts)."""
    import ast
    package = Path(mmvisattn.__file__).parent
    found = []
    for path in package.rglob('*.py'):
        if path.name == 'compat.py':
            continue
        tree = ast.parse(path.read_text())
        imported = {alias.asname or alias.name.split('.')[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and getattr(target.value, 'id', None) in imported - {'sys'}:
                    found.append(f'{path.relative_to(package)}:{node.lineno}')
    assert not found, found


def test_package_config_names_parse_the_metafiles_once(monkeypatch):
    """Loading a config with several ``mmdet::`` bases reads mmdet's model index once, however many
    bases name the package (stock mmengine: once per name)."""
    from mmengine.config import Config
    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils
    assert config_utils.load.remembered and config_module.is_installed.remembered  # import mmvisattn applied it
    reads = []
    parse = config_utils.load.__wrapped__
    monkeypatch.setattr(config_utils, 'load', mmvisattn.compat.remembered_metafiles(
        lambda path, *args, **kwargs: reads.append(path) or parse(path, *args, **kwargs)))
    config = Path(__file__).parents[1] / 'configs/vil/retinanet_vil-tiny_fpn_1x_coco.py'
    Config.fromfile(config)
    Config.fromfile(config)
    index = [path for path in reads if path.endswith('model-index.yml')]
    assert len(index) == 1 and len(reads) == len(set(reads)) > 1, reads


@pytest.mark.parametrize('patched', [True, False], ids=['patched', 'stock'])
def test_a_failed_best_checkpoint_keeps_the_previous_best(tmp_path, patched):
    """``save_best``: the previous best stays until the new one is written (stock mmengine removes it
    first, so a write that fails, or a kill, leaves none), and is removed once it is."""
    from types import SimpleNamespace

    from mmengine.hooks import CheckpointHook
    from mmengine.logging import MessageHub, MMLogger

    def save_checkpoint(out_dir, filename, **kwargs):
        if runner.failing:
            raise OSError('disk full')
        (Path(out_dir) / filename).write_bytes(b'weights')
    runner = SimpleNamespace(work_dir=str(tmp_path), epoch=0, iter=1, failing=False, save_checkpoint=save_checkpoint,
                             logger=MMLogger.get_instance(f'best-{patched}'),
                             message_hub=MessageHub.get_instance(f'best-{patched}'))
    hook = CheckpointHook(interval=1, by_epoch=False, save_best='acc', rule='greater')
    hook.before_train(runner)
    save_best = CheckpointHook._save_best_checkpoint if patched else CheckpointHook._save_best_checkpoint.__wrapped__
    save_best(hook, runner, {'acc': 1.0})
    runner.iter, runner.failing = 2, True
    with pytest.raises(OSError, match='disk full'):
        save_best(hook, runner, {'acc': 2.0})
    assert (tmp_path / 'best_acc_iter_1.pth').exists() == patched
    if patched:
        runner.iter, runner.failing = 3, False
        hook.best_ckpt_path = str(tmp_path / 'best_acc_iter_1.pth')  # as a run resumed from its checkpoint knows it
        save_best(hook, runner, {'acc': 3.0})
        assert sorted(path.name for path in tmp_path.glob('best_*')) == ['best_acc_iter_3.pth']


@pytest.mark.parametrize('rank', [0, 1])
def test_only_rank_0_writes_the_test_metrics_file(tmp_path, rank):
    """Every rank of a distributed test wrote ``<timestamp>.json`` (stock mmengine), leaving it
    unreadable when two writes overlapped; rank 0 alone writes it, every rank logs the metrics."""
    from types import SimpleNamespace

    from mmengine.hooks import LoggerHook
    assert LoggerHook.after_test_epoch.rank_0_dumps  # import mmvisattn applied it
    logged = []
    hook = LoggerHook()
    hook.json_log_path = 'run.json'
    runner = SimpleNamespace(rank=rank, log_dir=str(tmp_path), test_dataloader=[0, 1],
                             logger=SimpleNamespace(info=logged.append),
                             log_processor=SimpleNamespace(get_log_after_epoch=lambda *args, **kwargs: (
                                 dict(mIoU=50.0), 'mIoU: 50.0000')))
    hook.after_test_epoch(runner, dict(mIoU=50.0))
    assert logged == ['mIoU: 50.0000']
    written = tmp_path / 'run.json'
    assert (written.read_text() == '{"mIoU": 50.0}' if rank == 0 else not written.exists()), list(tmp_path.iterdir())


# what each patch's trigger (tests/patch_triggers.py) meets without the patch
FAILURES_WITHOUT = dict(
    import_torchvision_without_its_ops='RuntimeError: operator torchvision::nms does not exist',
    allow_runner_checkpoints='UnpicklingError: Weights only load failed',
    allow_half_mmcv_ops_on_cpu='RuntimeError: expected scalar type Float but found BFloat16',
    register_torch_hardsigmoid="KeyError: 'Hardsigmoid is not in the mmengine::model registry",
    register_flop_handles='SDPA counted as 0 FLOPs',
    count_dropped_annotations=f'error: DroppedAnnotationsHook needs the patch count_dropped_annotations, which '
                              f'{SKIP_VARIABLE} leaves out',
    name_undecodable_label_maps='UnidentifiedImageError without the path',
    write_checkpoints_atomically='a truncated file of',
    remember_package_config_lookups='YAML files parsed again',
    format_each_config_once='the config formatted 2 times',
    keep_attention_dropout_defaults='a default MultiheadAttention built with Dropout(p=0.1',
    dump_test_metrics_once='rank 1 wrote the metrics file')


@pytest.fixture(scope='module')
def outcomes_without_patches(tmp_path_factory) -> dict:
    """Every trigger in a process that leaves every patch out."""
    env = dict(tool_env(), **{SKIP_VARIABLE: ','.join(patch.__name__ for patch in PATCHES)})
    done = run_command([sys.executable, str(REPO / 'tests/patch_triggers.py'), str(tmp_path_factory.mktemp('stock'))],
                       timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('name', [patch.__name__ for patch in PATCHES])
def test_each_patch_is_still_needed(name, outcomes_without_patches, tmp_path):
    """Left out, the patch's trigger (the model, input or tool that needs it) fails as the patch
    table says; patched (this process), it does not."""
    assert FAILURES_WITHOUT[name] in outcomes_without_patches[name], outcomes_without_patches[name]
    assert TRIGGERS[name](tmp_path) == 'ok'


def test_every_patch_has_a_trigger():
    assert set(TRIGGERS) == set(FAILURES_WITHOUT) == {patch.__name__ for patch in PATCHES}


def test_a_name_that_is_no_patch_is_one_line():
    done = subprocess.run([sys.executable, '-c', 'import mmvisattn'], capture_output=True, text=True,
                          env=dict(tool_env(), **{SKIP_VARIABLE: 'allow_runner_checkpoints, nope'}), timeout=300)
    assert done.returncode == 1 and done.stderr.strip().startswith(
        f'error: {SKIP_VARIABLE} names nope, which are not patches; expected names among {PATCHES[0].__name__}, ')


def test_the_line_a_run_logs_names_every_patch_applied():
    assert patches_line() == f'mmvisattn patched the pinned stack: {", ".join(patch.__name__ for patch in PATCHES)}'
