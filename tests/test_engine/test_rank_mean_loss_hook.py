"""RankMeanLossHook: in a two-process gloo group both ranks log the mean of their losses, reported
as tensors or as Python floats."""
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mmvisattn.engine import RankMeanLossHook


def log_values_of_rank(rank: int, init_file: str, results) -> None:
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=rank, world_size=2)
    outputs = dict(loss=torch.tensor(1.0 + rank), loss_cls=4.0 * rank, acc=torch.tensor(50.0))
    RankMeanLossHook().after_train_iter(SimpleNamespace(), 0, outputs=outputs)
    results[rank] = {name: float(value) for name, value in outputs.items()}
    dist.destroy_process_group()


def test_both_ranks_log_the_mean(tmp_path):
    results = mp.Manager().dict()
    mp.spawn(log_values_of_rank, args=(str(tmp_path / 'init'), results), nprocs=2)
    assert results[0] == results[1] == dict(loss=1.5, loss_cls=2.0, acc=50.0)


def test_single_process_values_are_untouched():
    outputs = dict(loss=torch.tensor(3.0))
    RankMeanLossHook().after_train_iter(SimpleNamespace(), 0, outputs=outputs)
    assert float(outputs['loss']) == 3.0
