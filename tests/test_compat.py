"""The patches of ``mmvisattn.compat``: Runner checkpoints load under torch's weights_only loader
through an allowlist (anything that would execute a callable is still refused, and the callable does
not run); checkpoints reach the file backend a user configured; ``import mmvisattn`` applies only
fixes and additions, the tools' conveniences come with the tools; each patch is still needed."""
import io
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import torch
import torch.nn as nn
from mmengine.evaluator import BaseMetric
from mmengine.fileio import BaseStorageBackend, FileClient, register_backend
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner, load_checkpoint

import mmvisattn  # noqa: F401  (applies the allowlist)
from mmvisattn.compat import (
    ADDITIONS,
    FIXES,
    PATCHES,
    SKIP_VARIABLE,
    TOOL_PATCHES,
    history_buffer_statistic,
    runner_checkpoint_globals,
)

from .conftest import REPO, release, run_command, tool_env
from .patch_triggers import TRIGGERS


@pytest.fixture(autouse=True)
def default_scope_as_it_was():
    """The Runners built here make 'mmengine' the worker's default scope (mmengine's latest
    ``DefaultScope``); the tests after them in the worker build mmdet and mmseg models by registry
    under the scope they found."""
    from mmengine.registry import DefaultScope
    before = set(DefaultScope._instance_dict)
    yield
    for name in set(DefaultScope._instance_dict) - before:
        del DefaultScope._instance_dict[name]


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


def toy_runner(work_dir: Path, max_iters: int, resume: bool = False,
               checkpoint: Optional[dict] = None) -> Runner:
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), sampler=dict(type='InfiniteSampler'),
                              batch_size=4, num_workers=0, collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False,
                                           **(checkpoint or {}))),
        randomness=dict(seed=0), resume=resume, default_scope='mmengine')


def test_runner_checkpoint_resumes(tmp_path):
    toy_runner(tmp_path, max_iters=2).train()
    checkpoint = torch.load(tmp_path / 'iter_2.pth')  # weights_only is torch's default
    assert checkpoint['meta']['iter'] == 2
    assert checkpoint['message_hub']['log_scalars']
    runner = toy_runner(tmp_path, max_iters=4, resume=True)
    runner.train()
    assert runner.iter == 4
    assert (
        'Advance dataloader 2 steps'
        in (tmp_path / runner.timestamp / f'{runner.timestamp}.log').read_text()
    )


def test_mmengine_load_checkpoint_reads_runner_checkpoint(tmp_path):
    toy_runner(tmp_path, max_iters=2).train()
    model = ToyModel()
    load_checkpoint(model, str(tmp_path / 'iter_2.pth'))


class MemoryBackend(BaseStorageBackend):
    """A storage backend of mmengine's kind (as Petrel, S3 and HTTP are) that keeps its files in
    memory."""
    files: dict = {}

    def get(self, filepath):
        return self.files[str(filepath)]

    def get_text(self, filepath, encoding='utf-8'):
        return self.get(filepath).decode(encoding)

    def put(self, obj, filepath):
        self.files[str(filepath)] = bytes(obj)

    def put_text(self, obj, filepath, encoding='utf-8'):
        self.put(obj.encode(encoding), filepath)

    def exists(self, filepath):
        return str(filepath) in self.files

    isfile = exists

    def isdir(self, filepath):
        return False

    def remove(self, filepath):
        del self.files[str(filepath)]

    def join_path(self, filepath, *filepaths):
        return '/'.join([str(filepath).rstrip('/'), *filepaths])


register_backend('mmvisattn_test_memory', MemoryBackend, force=True, prefixes='memtest')
# mmengine's save_checkpoint asks the deprecated FileClient about a URI's prefix first
FileClient.register_backend('mmvisattn_test_memory', MemoryBackend, force=True, prefixes='memtest')


@pytest.mark.parametrize('where', ['backend_args', 'uri'])
def test_checkpoints_reach_the_configured_storage_backend(tmp_path, where):
    """A checkpoint named by a URI or written with ``backend_args`` goes through that file backend,
    as stock mmengine writes it (the atomic local write is for mmengine's local backend only)."""
    from mmengine.runner import runner as runner_module
    MemoryBackend.files.clear()
    if where == 'uri':
        runner_module.save_checkpoint({'weights': torch.ones(2)}, 'memtest://bucket/iter_1.pth')
        stored = 'memtest://bucket/iter_1.pth'
    else:
        stored = str(tmp_path / 'iter_1.pth')
        runner_module.save_checkpoint({'weights': torch.ones(2)}, stored,
                                      backend_args=dict(backend='mmvisattn_test_memory'))
    assert list(MemoryBackend.files) == [stored] and not list(tmp_path.iterdir())
    assert torch.load(io.BytesIO(MemoryBackend.files[stored]))['weights'].tolist() == [1.0, 1.0]


def test_checkpoint_hook_writes_and_prunes_through_its_backend(tmp_path):
    """``CheckpointHook(backend_args=...)`` as a lab that keeps checkpoints on Petrel or S3
    configures it: every checkpoint reaches the backend, the expired one is removed there after the
    new one is written, and ``last_checkpoint`` (local, as stock writes it) names the newest."""
    MemoryBackend.files.clear()
    runner = toy_runner(tmp_path, max_iters=6, checkpoint=dict(
        max_keep_ckpts=2, backend_args=dict(backend='mmvisattn_test_memory')))
    runner.train()
    assert sorted(MemoryBackend.files) == [f'{tmp_path}/iter_4.pth', f'{tmp_path}/iter_6.pth']
    assert not list(tmp_path.glob('*.pth'))
    assert (tmp_path / 'last_checkpoint').read_text() == f'{tmp_path}/iter_6.pth'


class Accuracy(BaseMetric):
    def process(self, data_batch, data_samples):
        self.results.append(1.0)

    def compute_metrics(self, results):
        return dict(accuracy=sum(results) / len(results))


@pytest.mark.parametrize('action', ['val', 'test'])
def test_validation_alone_with_the_default_checkpoint_hook(tmp_path, action):
    """``runner.val()`` / ``runner.test()`` without training first, with the default CheckpointHook
    (its file backend is set only before training): the save_best replacement steps aside as stock
    does."""
    loader = dict(dataset=ToyDataset(), sampler=dict(type='DefaultSampler', shuffle=False),
                  batch_size=4, num_workers=0, collate_fn=dict(type='default_collate'))
    runner = Runner(model=ToyModel(), work_dir=str(tmp_path), default_scope='mmengine',
                    **{f'{action}_dataloader': loader, f'{action}_cfg': dict(),
                       f'{action}_evaluator': [Accuracy()]})
    assert getattr(runner, action)() == dict(accuracy=1.0)


@HistoryBuffer.register_statistics
def first_logged(self) -> float:
    """A statistic of the suite's own, registered as mmengine's docs show (module level)."""
    return self._log_history[0]


def test_runner_checkpoint_with_a_registered_statistic_loads(tmp_path):
    """A statistic registered with ``HistoryBuffer.register_statistics`` is pickled by name into
    every Runner checkpoint written after; the restricted loader allows it (and still nothing
    else)."""
    toy_runner(tmp_path, max_iters=2).train()
    checkpoint = torch.load(tmp_path / 'iter_2.pth')
    buffer = next(iter(checkpoint['message_hub']['log_scalars'].values()))
    assert buffer.statistics('first_logged') == buffer._log_history[0]


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
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]],
                         dtype=dtype)
    scores = torch.tensor([0.9, 0.8, 0.7], dtype=dtype)
    dets, keep = batched_nms(boxes, scores, torch.zeros(3, dtype=torch.long),
                             dict(type='nms', iou_threshold=0.5))
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
    """Every function of ``compat.PATCHES`` has a row in the docs' patch table, and every row a
    function."""
    from mmvisattn.compat import PATCHES
    readme = (Path(__file__).resolve().parents[1] / 'docs/advanced/compat.md').read_text()
    table = readme[readme.index('| patch (`mmvisattn/compat.py`) |'):].split('\n\n')[0]
    rows = {line.split('|')[1].strip().strip('`') for line in table.splitlines()[2:]}
    assert rows == {patch.__name__ for patch in PATCHES}


def test_no_module_but_compat_patches_another_library():
    """An assignment to an attribute of an imported class or module (``CocoDataset.x = ...``)
    happens only in compat.py (``sys``'s streams and arguments are the interpreter's, not a
    library's code: the tool server sets them for each run it starts)."""
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
                if isinstance(target, ast.Attribute) and getattr(
                    target.value, 'id', None
                ) in imported - {'sys'}:
                    found.append(f'{path.relative_to(package)}:{node.lineno}')
    assert not found, found


def test_package_config_names_parse_the_metafiles_once(monkeypatch):
    """Loading a config with several ``mmdet::`` bases reads mmdet's model index once, however many
    bases name the package (stock mmengine: once per name)."""
    from mmengine.config import Config
    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils
    # the tools' patch (conftest.py)
    assert config_utils.load.remembered and config_module.is_installed.remembered
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
    """``save_best``: the previous best stays until the new one is written (stock mmengine removes
    it first, so a write that fails, or a kill, leaves none), and is removed once it is."""
    from types import SimpleNamespace

    from mmengine.hooks import CheckpointHook
    from mmengine.logging import MessageHub, MMLogger

    def save_checkpoint(out_dir, filename, **kwargs):
        if runner.failing:
            raise OSError('disk full')
        (Path(out_dir) / filename).write_bytes(b'weights')
    runner = SimpleNamespace(work_dir=str(tmp_path), epoch=0, iter=1, failing=False,
                             save_checkpoint=save_checkpoint,
                             logger=MMLogger.get_instance(f'best-{patched}'),
                             message_hub=MessageHub.get_instance(f'best-{patched}'))
    hook = CheckpointHook(interval=1, by_epoch=False, save_best='acc', rule='greater')
    hook.before_train(runner)
    save_best = (CheckpointHook._save_best_checkpoint if patched
                 else CheckpointHook._save_best_checkpoint.__wrapped__)
    save_best(hook, runner, {'acc': 1.0})
    runner.iter, runner.failing = 2, True
    with pytest.raises(OSError, match='disk full'):
        save_best(hook, runner, {'acc': 2.0})
    assert (tmp_path / 'best_acc_iter_1.pth').exists() == patched
    if patched:
        runner.iter, runner.failing = 3, False
        # as a run resumed from its checkpoint knows it
        hook.best_ckpt_path = str(tmp_path / 'best_acc_iter_1.pth')
        save_best(hook, runner, {'acc': 3.0})
        assert sorted(path.name for path in tmp_path.glob('best_*')) == ['best_acc_iter_3.pth']


@pytest.mark.parametrize('rank', [0, 1])
def test_only_the_main_process_writes_the_test_metrics_file(tmp_path, rank, monkeypatch):
    """Every rank of a distributed test wrote ``<timestamp>.json`` (stock mmengine), leaving it
    unreadable when two writes overlapped; the main process alone writes it, every rank logs the
    metrics. The rank is mmengine's (``is_main_process``), as the stock hooks read it."""
    from types import SimpleNamespace

    from mmengine.dist import utils as dist_utils
    from mmengine.hooks import LoggerHook
    assert LoggerHook.after_test_epoch.main_process_dumps  # import mmvisattn applied it
    monkeypatch.setattr(dist_utils, 'get_rank', lambda group=None: rank)
    logged = []
    hook = LoggerHook()
    hook.json_log_path = 'run.json'
    runner = SimpleNamespace(
        log_dir=str(tmp_path),
        test_dataloader=[0, 1],
        logger=SimpleNamespace(info=logged.append),
        log_processor=SimpleNamespace(
            get_log_after_epoch=lambda *args, **kwargs: (dict(mIoU=50.0), 'mIoU: 50.0000')
        ),
    )
    hook.after_test_epoch(runner, dict(mIoU=50.0))
    assert logged == ['mIoU: 50.0000']
    written = tmp_path / 'run.json'
    assert (written.read_text() == '{"mIoU": 50.0}' if rank == 0
            else not written.exists()), list(tmp_path.iterdir())


# what each patch's trigger (tests/patch_triggers.py) meets without the patch
FAILURES_WITHOUT = dict(
    import_torchvision_without_its_ops='RuntimeError: operator torchvision::nms does not exist',
    allow_runner_checkpoints='UnpicklingError: Weights only load failed',
    allow_half_mmcv_ops_on_cpu='RuntimeError: expected scalar type Float but found BFloat16',
    register_torch_hardsigmoid="KeyError: 'Hardsigmoid is not in the mmengine::model registry",
    register_flop_handles='SDPA counted as 0 FLOPs',
    count_dropped_annotations='error: DroppedAnnotationsHook needs the patch '
    f'count_dropped_annotations, which {SKIP_VARIABLE} leaves out',
    name_undecodable_label_maps='UnidentifiedImageError without the path',
    write_checkpoints_atomically='a truncated file of',
    remember_package_config_lookups='YAML files parsed again',
    format_each_config_once='the config formatted 2 times',
    compile_optimizer_steps="'UserDefinedDictVariable' object has no attribute 'items'",
    keep_attention_dropout_defaults='a default MultiheadAttention built with Dropout(p=0.1',
    dump_test_metrics_once='rank 1 wrote the metrics file',
    export_onnx_with_torchscript="ModuleNotFoundError: No module named 'onnxscript'",
    restore_onnx_cast_long="ImportError: cannot import name '_cast_Long'")


@pytest.fixture(scope='module')
def outcomes_without_patches(tmp_path_factory) -> dict:
    """Every trigger in a process that leaves every patch out."""
    env = dict(tool_env(), **{SKIP_VARIABLE: ','.join(patch.__name__ for patch in PATCHES)})
    done = run_command([sys.executable, str(REPO / 'tests/patch_triggers.py'),
                        str(tmp_path_factory.mktemp('stock'))],
                       timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# The patches whose defect only some releases of the declared range have (docs/advanced/compat.md):
# where this torch has it not, the trigger runs without the patch, and the test says so instead of
# failing
TORCH = release(torch.__version__)
DEFECT_WHERE = dict(
    export_onnx_with_torchscript=('torch >= 2.9, whose torch.onnx.export defaults to dynamo',
                                  TORCH >= (2, 9)),
    restore_onnx_cast_long=('torch >= 2.13, which removed _cast_Long', TORCH >= (2, 13)),
    import_torchvision_without_its_ops=("a CPU build of torch beside torchvision's CUDA wheel",
                                        torch.version.cuda is None))


@pytest.mark.parametrize('name', [patch.__name__ for patch in PATCHES])
def test_each_patch_is_still_needed(name, outcomes_without_patches, tmp_path):
    """Left out, the patch's trigger (the model, input or tool that needs it) fails as the patch
    table says; patched (this process, with the patch applied), it does not."""
    if name in DEFECT_WHERE and not DEFECT_WHERE[name][1]:
        assert TRIGGERS[name](tmp_path) == 'ok'
        pytest.skip(f'{name} fixes a defect of {DEFECT_WHERE[name][0]}; torch {torch.__version__} '
                    'here has it not')
    assert FAILURES_WITHOUT[name] in outcomes_without_patches[name], outcomes_without_patches[name]
    # those applied on demand (the hook's, mmdeploy's)
    mmvisattn.compat.apply(getattr(mmvisattn.compat, name))
    assert TRIGGERS[name](tmp_path) == 'ok'


def test_every_patch_has_a_trigger():
    assert set(TRIGGERS) == set(FAILURES_WITHOUT) == {patch.__name__ for patch in PATCHES}


def test_a_name_that_is_no_patch_is_one_line():
    done = subprocess.run([sys.executable, '-c', 'import mmvisattn'], capture_output=True,
                          text=True,
                          env=dict(tool_env(), **{SKIP_VARIABLE: 'allow_runner_checkpoints, nope'}),
                          timeout=300)
    assert done.returncode == 1 and done.stderr.strip().startswith(
        f'error: {SKIP_VARIABLE} names nope, which are not patches; expected names among '
        f'{PATCHES[0].__name__}, ')


IMPORT_ONLY = """
import json
from mmengine.config import utils as config_utils
from mmdet.datasets import CocoDataset
from mmcv.ops import RoIAlign
import mmvisattn
from mmvisattn.compat import apply_tool_patches, patches_line
print(json.dumps(dict(line=patches_line(), altered=[
    name for name, altered in (
        ('config lookups', getattr(config_utils.load, 'remembered', False)),
        ('CocoDataset', getattr(CocoDataset.parse_data_info, 'counts_drops', False)),
        ('RoIAlign', getattr(RoIAlign.forward, 'float32_on_cpu', False))) if altered])))
apply_tool_patches()
print(json.dumps(dict(line=patches_line())))
"""


def test_import_applies_fixes_and_additions_only():
    """``import mmvisattn`` in a fresh process applies :data:`FIXES` and :data:`ADDITIONS`, and none
    of the tools' conveniences (which the line of a run names once the tools apply them)."""
    done = subprocess.run([sys.executable, '-c', IMPORT_ONLY], capture_output=True, text=True,
                          env=tool_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    on_import, with_tools = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    names = [patch.__name__ for patch in FIXES + ADDITIONS]
    assert on_import == dict(line=f'mmvisattn patched the pinned stack: {", ".join(names)}',
                             altered=[])
    names += [patch.__name__ for patch in TOOL_PATCHES]
    assert with_tools['line'] == f'mmvisattn patched the pinned stack: {", ".join(names)}'
