"""Every backbone trains under DDP as mmengine wraps a model by default
(``find_unused_parameters=False``) with the last stage left out of ``out_indices`` and
``with_cp=True``: two gloo processes on the CPU, three steps on different images per rank, and the
ranks' weights equal afterwards (every gradient was reduced)."""
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from .test_contract import CASES, IMAGE, build, reduced_out_indices

STEPS = 3


def train_on_rank(rank: int, init_file: str, results) -> None:
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=rank, world_size=2)
    torch.set_num_threads(1)
    for name in CASES:
        model = DistributedDataParallel(build(name, out_indices=reduced_out_indices(name),
                                              with_cp=True))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        torch.manual_seed(rank)
        for _ in range(STEPS):
            optimizer.zero_grad()
            sum(out.square().mean() for out in model(torch.randn(IMAGE))).backward()
            optimizer.step()
        results[rank, name] = [param.detach().clone() for param in model.parameters()]
    dist.destroy_process_group()


def test_ddp_without_unused_parameters_trains_every_backbone(tmp_path):
    results = mp.Manager().dict()
    mp.spawn(train_on_rank, args=(str(tmp_path / 'init'), results), nprocs=2)
    for name in CASES:
        first, second = results[0, name], results[1, name]
        assert first and all(torch.equal(a, b) for a, b in zip(first, second)), name
