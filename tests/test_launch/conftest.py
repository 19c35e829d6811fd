"""What the fault tests share: a small copy of the demo data per test, a digest of everything
outside a run's work dir, the assertion that a tool failed with one line and no traceback, a
free local port and the losses a run logged."""
import hashlib
import json
import socket
from pathlib import Path

import pytest

from ..conftest import REPO, run_tool

DET_DEMO = REPO / 'configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'
SEG_DEMO = REPO / 'configs/demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'
ONE_ITERATION = ['--cfg-options', 'train_cfg.max_iters=1', 'train_dataloader.batch_size=2',
                 'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False']


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture
def small_data(tmp_path) -> Path:
    """A working directory with its own 8 + 4 image shapes data, free to be damaged."""
    return write_small_data(tmp_path)


def write_small_data(root: Path) -> Path:
    run_tool(['tools/misc/make_demo_data.py', '--out', root / 'data' / 'shapes', '--num-train', 8,
              '--num-val', 4, '--size', 64], cwd=root)
    return root


def tree_digest(root: Path, skip: Path) -> str:
    """Names and contents of every file under ``root`` except those under ``skip``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob('*') if p.is_file() and skip not in p.parents):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def fails_in_one_line(args, cwd: Path, work_dir: Path) -> str:
    """Run a tool that must fail; return its one-line message after checking that stderr holds no
    traceback and that nothing outside ``work_dir`` changed."""
    before = tree_digest(cwd, work_dir)
    done = run_tool(args, cwd=cwd, check=False)
    assert done.returncode != 0, done.stdout[-2000:]
    assert 'Traceback' not in done.stderr, done.stderr[-4000:]
    errors = [line for line in done.stderr.strip().splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and done.stderr.strip().splitlines()[-1] == errors[0], done.stderr[
        -3000:
    ]
    assert tree_digest(cwd, work_dir) == before, 'a file outside the work dir changed'
    return errors[0]


def logged_losses(work_dir: Path) -> dict:
    """``{iteration: loss}`` from every run's scalars.json under ``work_dir``, at full precision."""
    losses = {}
    for path in sorted(work_dir.glob('*/vis_data/scalars.json')):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if 'loss' in record:
                losses[record['step']] = record['loss']
    return losses
