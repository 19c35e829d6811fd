"""Every family's demo trains with ``compile=True`` through ``tools/train.py``, as mmengine's Runner
takes it (``--cfg-options compile.backend=eager``: the Dynamo tracing, graph breaks and guards of
``compile=True`` without inductor's code generation, which takes minutes a model on 2 cores): two
iterations of batch 2, the compiled ``train_step`` including the optimizer step, whose parameter
groups are ``ConfigDict`` s wherever the config names ``paramwise_cfg`` (``compile_optimizer_steps``
of :mod:`mmvisattn.compat`). The graph breaks Dynamo logs are counted and printed (``pytest -s``)
for the records; none may be in the project's code."""
import re
from pathlib import Path

import pytest
import torch

import mmvisattn  # also lets torch.load read Runner checkpoints

from ..conftest import REPO, run_tool
from ..test_launch.test_reproducibility import FAMILY_DEMOS, tensors

OPTIONS = ['compile.backend=eager', 'train_cfg.max_iters=2', 'train_dataloader.batch_size=2',
           'default_hooks.checkpoint.interval=1', 'default_hooks.checkpoint.max_keep_ckpts=2',
           'val_cfg=None', 'val_dataloader=None', 'val_evaluator=None']
PACKAGE = str(Path(mmvisattn.__file__).resolve().parent)
GRAPH_BREAK = re.compile(r'\] Graph break in user code at (\S+)')


@pytest.mark.parametrize('family', FAMILY_DEMOS)
def test_a_demo_trains_compiled_optimizer_step_included(workspace, tmp_path, monkeypatch, family):
    config, options = FAMILY_DEMOS[family]
    monkeypatch.setenv('TORCH_LOGS', 'graph_breaks')
    done = run_tool(['tools/train.py', REPO / 'configs' / config, '--work-dir', tmp_path,
                     '--cfg-options', *OPTIONS, *options], cwd=workspace, timeout=1200)
    assert 'Model has been "compiled"' in done.stdout + done.stderr
    first, second = (
        tensors(torch.load(tmp_path / f'iter_{step}.pth')['state_dict']) for step in (1, 2)
    )
    assert any(not torch.equal(first[name],
                               second[name]) for name in first), 'the second step changed nothing'
    breaks = GRAPH_BREAK.findall(done.stderr)
    print(f'{family}: {len(breaks)} graph breaks at {len(set(breaks))} places')
    assert not [place for place in breaks if place.startswith(PACKAGE)], breaks  # stock code's only
