"""tools/train.py and tools/test.py as a user runs them: short training, COCO mAP and mIoU
printed by the test tool, two-process CPU training through dist_train.sh, and one-line errors for
bad input (the fault cases a user meets are in tests/test_launch)."""
import math
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest
import torch

import mmvisattn  # noqa: F401  (allowlists the types a Runner checkpoint holds for torch.load)

from ..conftest import REPO, run_command, run_tool, tool_env

DET_DEMO = REPO / 'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'
SEG_DEMO = REPO / 'configs/demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'
CLS_DEMO = REPO / 'configs/picodet/castling-levit-s-demo_1xb32-300i_shapes-imagenet-64.py'
SHORT = ['train_cfg.max_iters=2', 'train_dataloader.batch_size=2']
STOCK_TOOLS = Path(__import__('mmseg').__file__).parent / '.mim/tools/analysis_tools'
# the tests of the trained demos (module fixtures) on one worker: each demo trains once
pytestmark = pytest.mark.xdist_group('train_test')


def train(config, work_dir, cwd, *options, extra=()):
    done = run_tool(['tools/train.py', config, '--work-dir', work_dir, *extra, '--cfg-options',
                     *SHORT, *options],
                    cwd=cwd)
    assert warnings_of_ours(done) == []
    return done


def warnings_of_ours(done) -> list:
    """Python warnings a run printed from this repository's code (not from the installed
    packages)."""
    located = re.findall(r'^(\S+\.py):\d+: (\w*Warning)', done.stdout + done.stderr,
                         flags=re.MULTILINE)
    return [(path, kind) for path, kind in located
            if Path(path).resolve().is_relative_to(REPO)
            and 'site-packages' not in Path(path).parts]


@pytest.fixture(scope='module')
def det_run(workspace, tmp_path_factory) -> Path:
    """The detection demo trained for 2 iterations with ``--auto-scale-lr``; its work dir."""
    work_dir = tmp_path_factory.mktemp('det')
    trained = train(DET_DEMO, work_dir, workspace, extra=['--auto-scale-lr'])
    assert (
        'LR is set based on batch size of 8 and the current batch size is 2'
        in trained.stdout + trained.stderr
    )
    return work_dir


@pytest.fixture(scope='module')
def seg_run(workspace, tmp_path_factory) -> Tuple[Path, subprocess.CompletedProcess]:
    """The segmentation demo trained for 2 iterations under ``--amp``; its work dir and its run."""
    work_dir = tmp_path_factory.mktemp('seg')
    return work_dir, train(SEG_DEMO, work_dir, workspace, 'default_hooks.logger.interval=1',
                           extra=['--amp'])


def test_train_then_test_prints_coco_map(workspace, det_run, tmp_path):
    assert (det_run / 'iter_2.pth').is_file()
    # after 2 iterations every score is near the 0.01 prior: keep them all so that COCO has results
    done = run_tool(['tools/test.py', DET_DEMO, det_run / 'iter_2.pth', '--work-dir', tmp_path,
                     '--show-dir', 'shown', '--cfg-options', 'model.test_cfg.score_thr=0.0'],
                    cwd=workspace)
    assert 'coco/bbox_mAP:' in done.stdout + done.stderr and warnings_of_ours(done) == []
    assert len(list(tmp_path.glob('*/shown/*.jpg'))) == 50


def test_amp_train_then_test_prints_miou(workspace, seg_run, tmp_path):
    """``--amp`` on a CPU-only machine trains under bfloat16 autocast (no CUDA loss scaler)."""
    work_dir, trained = seg_run
    assert "type='CPUAmpOptimWrapper'" in trained.stdout + trained.stderr
    losses = [float(x) for x in re.findall(r' loss: ([-0-9.naninf]+)',
                                           trained.stdout + trained.stderr)]
    assert losses and all(math.isfinite(x) for x in losses)
    # mmseg's own log analysis tool plots the run's loss (seaborn, which make install adds)
    log = next(work_dir.glob('*/vis_data/scalars.json'))
    run_tool([STOCK_TOOLS / 'analyze_logs.py', log, '--keys', 'loss', '--out',
              tmp_path / 'loss.png'], cwd=workspace)
    assert (tmp_path / 'loss.png').stat().st_size > 0
    done = run_tool(['tools/test.py', SEG_DEMO, work_dir / 'iter_2.pth', '--work-dir', tmp_path],
                    cwd=workspace)
    assert 'mIoU:' in done.stdout + done.stderr


def test_two_process_cpu_training_outside_the_venv(workspace, tmp_path):
    """dist_train.sh picks the project's .venv when the shell's PATH has no torch, and without PORT
    a free port: torch's default, 29500, is held by another program meanwhile."""
    env = dict(tool_env(), PATH='/usr/bin:/bin')
    for name in ('PYTHON', 'PORT'):
        env.pop(name, None)
    with socket.socket() as default_port:
        try:
            default_port.bind(('', 29500))
        except OSError:
            pass  # held already
        done = run_command(['bash', str(REPO / 'tools/dist_train.sh'), str(DET_DEMO), '2',
                            '--work-dir',
                            str(tmp_path), '--cfg-options', *SHORT], cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr[-5000:]
    # the ranks' results were gathered in the run's folder
    assert not (workspace / '.dist_test').exists()
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert 'Distributed training: True' in log and "dist_cfg: {'backend': 'gloo'}" in log
    assert 'GPU number: 2' in log  # mmengine's name for the world size
    # both ranks' random states, gathered for the checkpoint (and only for it)
    assert len(torch.load(tmp_path / 'iter_2.pth')['random_states']) == 2


@pytest.mark.parametrize('tool', ['tools/train.py', 'tools/test.py'])
def test_missing_config_is_one_line(tool, tmp_path):
    args = [tool, tmp_path / 'nope.py'] + (['ckpt.pth'] if tool.endswith('test.py') else [])
    done = run_tool(args, cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: config file '{tmp_path / 'nope.py'}' does not exist"


def test_missing_data_root_is_one_line(tmp_path):
    done = run_tool(['tools/train.py', DET_DEMO, '--work-dir', tmp_path], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: train_dataloader.dataset.data_root 'data/shapes/coco/' does not exist")


def test_missing_checkpoint_is_one_line(workspace, tmp_path):
    done = run_tool(['tools/test.py', DET_DEMO, tmp_path / 'missing.pth'], cwd=workspace,
                    check=False)
    assert done.returncode == 1
    assert 'missing.pth' in done.stderr and 'does not exist' in done.stderr


def test_corrupted_annotation_is_named(tmp_path):
    run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'data' / 'shapes', '--num-train',
              4, '--num-val', 2],
             cwd=tmp_path)
    ann_file = tmp_path / 'data/shapes/coco/annotations/instances_train2017.json'
    ann_file.write_text(ann_file.read_text()[:100])
    done = run_tool(['tools/train.py', DET_DEMO, '--work-dir', tmp_path / 'w'], cwd=tmp_path,
                    check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: corrupted annotation file 'data/shapes/coco/annotations/instances_train2017.json': "
        "not valid JSON")


def stock_flags(script) -> set:
    """The option strings a stock ``tools/*.py`` declares (``--x``), read from its source."""
    import ast
    flags = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, 'attr', '') == 'add_argument':
            flags |= {arg.value for arg in node.args if isinstance(arg, ast.Constant)
                      and arg.value.startswith('-')}
    return flags


@pytest.mark.parametrize('tool', ['train.py', 'test.py'])
def test_the_tools_take_every_flag_of_the_stock_tools(tool):
    """mmdet's, mmseg's and mmpretrain's own scripts, as installed with them (mim runs these)."""
    import mmdet
    import mmpretrain
    import mmseg
    # the tools' logic, and the launcher's flags in runner.py
    launch = REPO / 'mmvisattn' / 'launch'
    ours = stock_flags(launch / tool) | stock_flags(launch / 'runner.py')
    for package in (mmdet, mmseg, mmpretrain):
        stock = stock_flags(Path(package.__file__).parent / '.mim' / 'tools' / tool)
        assert stock and stock <= ours, (package.__name__, sorted(stock - ours))


def small_shapes(root):
    run_tool(['tools/misc/make_demo_data.py', '--out', root / 'data' / 'shapes', '--num-train', 4,
              '--num-val', 3, '--size', 64], cwd=root)


def test_stock_test_flags_dump_augment_and_refuse_in_one_line(det_run, seg_run, tmp_path):
    """``--out`` and ``--tta`` with their stock meaning per scope (the trained demos tested on 3
    small images): mmdet dumps a pickle and takes mmdet's flip default, mmseg writes label maps and
    needs the config's TTA; ``--auto-scale-lr`` (the detection run) scales by the config's base
    batch."""
    small_shapes(tmp_path)
    det, seg = det_run / 'iter_2.pth', seg_run[0] / 'iter_2.pth'
    run_tool(['tools/test.py', DET_DEMO, det, '--work-dir', tmp_path / 'det', '--tta', '--out',
              tmp_path / 'det.pkl', '--cfg-options', 'model.test_cfg.score_thr=0.0'], cwd=tmp_path)
    from mmengine.fileio import load
    assert len(load(tmp_path / 'det.pkl')) == 3
    refused = run_tool(['tools/test.py', DET_DEMO, det, '--out', 'det.txt'], cwd=tmp_path,
                       check=False)
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
        "error: --out 'det.txt': expected a file ending in .pkl or .pickle (mmdet and mmpretrain "
        "configs dump their "
        'predictions with pickle)')
    run_tool(['tools/test.py', SEG_DEMO, seg, '--work-dir', tmp_path / 'seg', '--out',
              tmp_path / 'labels'],
             cwd=tmp_path)
    assert len(list((tmp_path / 'labels').rglob('*.png'))) == 3
    refused = run_tool(['tools/test.py', SEG_DEMO, seg, '--tta'], cwd=tmp_path, check=False)
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith('error: --tta needs tta_pipeline in the config')
    )


def test_mmpretrain_configs_train_and_test_with_mmpretrains_flags(workspace, tmp_path):
    """An ImageNet-layout classification config (mmpretrain scope) through the same tools: trained
    without validation, pinned memory or persistent workers, then tested with mmpretrain's flip TTA,
    its predictions dumped (``--out``), or its metrics (``--out-item metrics``) with every 100th
    image drawn."""
    trained = train(CLS_DEMO, tmp_path / 'cls', workspace, 'train_cfg.val_interval=1',
                    extra=['--no-validate', '--no-pin-memory', '--no-persistent-workers'])
    # --no-validate: no validation at iteration 1
    assert 'accuracy/top1' not in trained.stdout + trained.stderr
    checkpoint = tmp_path / 'cls' / 'iter_2.pth'
    done = run_tool(['tools/test.py', CLS_DEMO, checkpoint, '--work-dir', tmp_path / 'test',
                     '--tta', '--out', tmp_path / 'pred.pkl'], cwd=workspace)
    assert 'accuracy/top1:' in done.stdout + done.stderr and warnings_of_ours(done) == []
    from mmengine.fileio import load
    predictions = load(tmp_path / 'pred.pkl')
    assert len(predictions) == 200 and predictions[0]['pred_score'].shape == (3,)
    run_tool(['tools/test.py', CLS_DEMO, checkpoint, '--work-dir', tmp_path / 'metrics', '--out',
              tmp_path / 'metrics.json', '--out-item', 'metrics', '--show-dir', 'shown',
              '--interval', 100],
             cwd=workspace)
    assert set(load(tmp_path / 'metrics.json')) == {'accuracy/top1'}
    # every 100th of the 200 images, as mmpretrain's hook counts them (its last, shorter batch
    # counts again)
    assert 2 <= len(list((tmp_path / 'metrics' / 'shown').rglob('*.png'))) <= 3
    for flags, message in ((['--out-item', 'metrics'],
                            'error: --out-item says what --out holds; give --out FILE too'),
                           (['--tta', '--show-dir', 'shown'],
                            "error: --tta with --show / --show-dir: mmpretrain's"),
                           (['--out', 'metrics.txt', '--out-item', 'metrics'],
                            "error: --out 'metrics.txt': expected a file ending in .json, .yaml, "
                            ".yml, .pkl, .pickle")):
        refused = run_tool(['tools/test.py', CLS_DEMO, checkpoint, *flags], cwd=workspace,
                           check=False)
        assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1].startswith(
            message
        )


def test_mim_trains_an_mmpretrain_config(workspace, tmp_path):
    """``mim train mmpretrain CONFIG`` runs mmpretrain's own ``tools/train.py`` on a project
    config."""
    mim = Path(sys.executable).with_name('mim')
    done = run_command([str(mim), 'train', 'mmpretrain', str(CLS_DEMO), '--work-dir', str(tmp_path),
                        '--gpus', '0',
                        '--cfg-options', 'train_cfg.max_iters=2', 'train_cfg.val_interval=2'],
                       cwd=workspace, env=tool_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'accuracy/top1:' in done.stdout + done.stderr and (tmp_path / 'iter_2.pth').is_file()
