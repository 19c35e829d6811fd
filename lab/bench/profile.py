"""Where a training step spends its time and saved memory, module by module, for a
``benchmark_models.py`` pair heavier than its stock twin.

    python tools/analysis_tools/profile_training.py PAIR [--side project|stock] [--shape H W]
        [--batch 2] [--depth 3]

One step after a small warm-up: each module to ``--depth`` gets its forward seconds (children
included) and the bytes autograd saves while it is the innermost running module and still holds at
the end; the backward is given whole. Prints a Markdown table.
"""
import argparse
import time
from collections import defaultdict
from typing import Dict, List

import torch

from lab.bench.model_pairs import PAIRS, TrainingStep, build_training_model
from lab.bench.saved_tensors import SavedTensors
from mmvisattn.utils import count_parameters


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('pair', help=f'a pair key: {", ".join(PAIRS)}')
    parser.add_argument('--side', choices=('project', 'stock'), default='project')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help="default: the pair's training size")
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--depth', type=int, default=3,
                        help='modules with at most this many dots in their name')
    args = parser.parse_args(argv)
    if args.pair not in PAIRS:
        parser.error(f'pair {args.pair!r}: expected one of {sorted(PAIRS)}')
    pair = PAIRS[args.pair]
    args.shape = args.shape or list(pair.train_size)
    if min(args.shape) < 1 or any(side % pair.stride for side in args.shape):
        parser.error(f'--shape {args.shape}: expected positive sides divisible by {pair.stride}')
    return args


class ModuleProfile:
    """Forward seconds per module of ``model`` down to ``depth`` dots, and the innermost such module
    running (:meth:`innermost`, the label of what autograd saves)."""

    def __init__(self, model: torch.nn.Module, depth: int):
        self.running: List[str] = []
        self.started: Dict[str, float] = {}
        self.seconds: Dict[str, float] = defaultdict(float)
        self.handles = []
        for name, module in model.named_modules():
            if name and name.count('.') < depth:
                self.handles.append(module.register_forward_pre_hook(self._enter(name)))
                self.handles.append(
                    module.register_forward_hook(self._leave(name), always_call=True)
                )

    def _enter(self, name: str):
        def hook(module, inputs):
            self.running.append(name)
            self.started[name] = time.perf_counter()
        return hook

    def _leave(self, name: str):
        def hook(module, inputs, outputs):
            self.seconds[name] += time.perf_counter() - self.started.pop(name)
            self.running.remove(name)
        return hook

    def innermost(self) -> str:
        return self.running[-1] if self.running else '(outside modules)'

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def profile(args: argparse.Namespace) -> str:
    pair = PAIRS[args.pair]
    torch.manual_seed(0)
    model = build_training_model(*((pair.project, pair.deploy) if args.side == 'project'
                                   else (pair.stock, False)))
    TrainingStep(model, args.batch, pair.stride * 2, pair.stride * 2)()
    step = TrainingStep(model, args.batch, *args.shape)
    modules = ModuleProfile(model, args.depth)
    start = time.perf_counter()
    with SavedTensors(modules.innermost) as saved:
        loss = step.loss()
    saved_by_module = saved.alive()
    step.backward(loss)
    total = time.perf_counter() - start
    modules.remove()
    forward = sum(seconds for name, seconds in modules.seconds.items() if '.' not in name)
    lines = [f'{args.pair} ({args.side}: '
             f'{pair.project if args.side == "project" else pair.stock}), '
             f'{args.shape[0]}x{args.shape[1]}, batch {args.batch}: step {total:.2f} s, of which '
             'the forward of the '
             f'top-level modules {forward:.2f} s; {count_parameters(model) / 1e6:.2f} M parameters',
             '',
             '| module | forward s | saved for backward MB (while innermost) |', '|---|---|---|']
    names = sorted(set(modules.seconds) | set(saved_by_module),
                   key=lambda n: (n == '(outside modules)', n))
    for name in names:
        lines.append(f'| {name} | {modules.seconds.get(name, 0):.3f} | '
                     f'{saved_by_module.get(name, 0) / 2**20:,.0f} |')
    return '\n'.join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(2)
    print(profile(args))


if __name__ == '__main__':
    main()
