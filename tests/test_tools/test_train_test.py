"""tools/train.py and tools/test.py as a user runs them: short training, COCO mAP and mIoU
printed by the test tool, two-process CPU training through dist_train.sh, and one-line errors for
bad input (the fault cases a user meets are in tests/test_launch)."""
import math
import random
import re

import pytest
import torch

from ..conftest import REPO, run_command, run_tool, tool_env

DET_DEMO = REPO / 'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'
SEG_DEMO = REPO / 'configs/demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'
SHORT = ['train_cfg.max_iters=2', 'train_dataloader.batch_size=2']


def train(config, work_dir, cwd, *options, extra=()):
    return run_tool(['tools/train.py', config, '--work-dir', work_dir, *extra, '--cfg-options', *SHORT, *options],
                    cwd=cwd)


def test_train_then_test_prints_coco_map(workspace, tmp_path):
    train(DET_DEMO, tmp_path, workspace)
    assert (tmp_path / 'iter_2.pth').is_file()
    # after 2 iterations every score is near the 0.01 prior: keep them all so that COCO has results
    done = run_tool(['tools/test.py', DET_DEMO, tmp_path / 'iter_2.pth', '--work-dir', tmp_path,
                     '--show-dir', 'shown', '--cfg-options', 'model.test_cfg.score_thr=0.0'], cwd=workspace)
    assert 'coco/bbox_mAP:' in done.stdout + done.stderr
    assert len(list(tmp_path.glob('*/shown/*.jpg'))) == 50


def test_amp_train_then_test_prints_miou(workspace, tmp_path):
    """``--amp`` on a CPU-only machine trains under bfloat16 autocast (no CUDA loss scaler)."""
    trained = train(SEG_DEMO, tmp_path, workspace, 'default_hooks.logger.interval=1', extra=['--amp'])
    assert "type='CPUAmpOptimWrapper'" in trained.stdout + trained.stderr
    losses = [float(x) for x in re.findall(r' loss: ([-0-9.naninf]+)', trained.stdout + trained.stderr)]
    assert losses and all(math.isfinite(x) for x in losses)
    done = run_tool(['tools/test.py', SEG_DEMO, tmp_path / 'iter_2.pth', '--work-dir', tmp_path], cwd=workspace)
    assert 'mIoU:' in done.stdout + done.stderr


def test_two_process_cpu_training_outside_the_venv(workspace, tmp_path):
    """dist_train.sh picks the project's .venv when the shell's PATH has no torch."""
    env = dict(tool_env(), PATH='/usr/bin:/bin', PORT=str(random.randint(20000, 40000)))
    env.pop('PYTHON', None)
    done = run_command(['bash', str(REPO / 'tools/dist_train.sh'), str(DET_DEMO), '2', '--work-dir', str(tmp_path),
                        '--cfg-options', *SHORT], cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr[-5000:]
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
    done = run_tool(['tools/test.py', DET_DEMO, tmp_path / 'missing.pth'], cwd=workspace, check=False)
    assert done.returncode == 1
    assert 'missing.pth' in done.stderr and 'does not exist' in done.stderr


def test_corrupted_annotation_is_named(tmp_path):
    run_tool(['tools/misc/make_demo_data.py', '--out', tmp_path / 'data' / 'shapes', '--num-train', 4, '--num-val', 2],
             cwd=tmp_path)
    ann_file = tmp_path / 'data/shapes/coco/annotations/instances_train2017.json'
    ann_file.write_text(ann_file.read_text()[:100])
    done = run_tool(['tools/train.py', DET_DEMO, '--work-dir', tmp_path / 'w'], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: corrupted annotation file 'data/shapes/coco/annotations/instances_train2017.json': not valid JSON")
