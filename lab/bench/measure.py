"""The measurements of ``benchmark_suite.py``, each in a process of its own:

    python -m lab.bench.measure '{"kind": "time", ...}'

prints one JSON line (:data:`CHILDREN` names the kinds). Ops are timed in paired rounds
(:func:`mmvisattn.analysis.timing.rounds`; ratios are medians of per-round ratios); memory is the
peak resident set's growth over one step (:func:`mmvisattn.analysis.timing.peak_growth_mb`).
"""
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from lab.bench.official_code import (
    CASTLING,
    PERVIT,
    VIL,
    checkout_on_path,
    cuda_calls_stay_on_cpu,
    import_file,
    stub_timm,
)
from lab.bench.suite_cases import MODEL_GROUPS, OP_CASES, OpCase
from mmvisattn.analysis import timing

WARM_UP_GRID = 8  # grid of the step that precedes each memory measurement
OFFICIAL_REPOS = {'vil': VIL, 'castling': CASTLING, 'pervit': PERVIT}


def official_attention(name: str, peers: Path, dims: int, heads: int, grid: int):
    """The official module ``name`` and its call ``x -> out`` on a ``grid x grid`` map."""
    import torch.nn as nn
    root = peers / OFFICIAL_REPOS[name]
    if not root.is_dir():
        raise SystemExit(f'benchmark_suite: {root} is missing (check out {OFFICIAL_REPOS[name]} '
                         'there)')
    stub_timm()
    if name == 'vil':
        layers = root / 'src' / 'models' / 'layers'
        longformer = import_file('vil_layers.longformer2d', layers / 'longformer2d.py',
                                 package_dir=layers)
        module = longformer.Long2DSCSelfAttention(dims, num_heads=heads, w=7, nglo=1, rpe=True,
                                                  exact=0)
        return module, lambda x: module(x, grid, grid), 1
    if name == 'castling':
        attention = import_file('castling_attention', root / 'attention.py')
        module = attention.LinAngularAttention(dims, num_heads=heads)
        return module, module, 0
    import torch
    with checkout_on_path(root):
        from model.pervit import MPA
        from model.utils import OffsetGenerator
    with cuda_calls_stay_on_cpu():
        OffsetGenerator.initialize(grid, pad_size=2)
        distances = OffsetGenerator.get_qk_vec().norm(p=2, dim=-1, keepdim=True)
        module = MPA(dims, heads, qkv_bias=False, norm_init=torch.tensor([0.0, 1.0]))
    module.rpe_proj = nn.Linear(1, 4 * heads)
    return module, lambda x: module(x, module.rpe_proj(distances)), 0


def attention_module(spec: str, dims: int, heads: int, grid: int, peers: Optional[Path]):
    """``(module, call, extra tokens)`` for a spec; project modules switched to deploy."""
    if spec.startswith('official:'):
        return official_attention(spec.split(':', 1)[1], peers, dims, heads, grid)
    from mmvisattn.analysis.benchmark_attention import build_module, parse_type
    module = build_module(parse_type(spec), dims, heads)
    if hasattr(module, 'switch_to_deploy'):
        module.switch_to_deploy()
    return module, lambda x: module(x, (grid, grid)), getattr(module, 'num_extra_tokens', 0)


def training_step(spec: str, case: OpCase, grid: int, peers: Optional[Path],
                  impl: Optional[str] = None) -> Callable[[], None]:
    """One forward + backward of the module of ``spec``; ``impl`` overrides the op path of a project
    module that has one."""
    import torch
    module, call, extra = attention_module(spec, case.dims, case.heads, grid, peers)
    module.train()
    if impl is not None and impl in getattr(module, 'impls', ()):
        module.impl = impl
    x = torch.randn(case.batch, extra + grid * grid, case.dims, requires_grad=True)

    def step() -> None:
        call(x).sum().backward()
    return step


def median_ratio(times: Sequence[float], peer_times: Sequence[float]) -> float:
    """The median of the per-round ratios."""
    return statistics.median(a / b for a, b in zip(times, peer_times))


def ratio_summary(times: Dict[str, List[float]],
                  ratios: Dict[str, Tuple[str, str]]) -> Dict[str, object]:
    """Median times in ms and, per ``name: (label, peer label)`` of ``ratios``, the median ratio."""
    return {
        'ms': {label: 1e3 * statistics.median(t) for label, t in times.items()},
        'ratio': {
            name: median_ratio(times[mine], times[peer]) for name, (mine, peer) in ratios.items()
        },
        'rounds': len(next(iter(times.values()))),
    }


def runnable(specs: Dict[str, str], peers: Optional[str]) -> Dict[str, str]:
    """``specs`` without the official modules when no ``--peers`` folder was given."""
    return {
        label: spec for label, spec in specs.items() if peers or not spec.startswith('official:')
    }


def child_time(payload: dict) -> dict:
    import torch
    case, grid, peers = OP_CASES[payload['case']], payload['grid'], payload['peers']
    labels = {**case.ours, **runnable(case.peers, peers)}
    peers = Path(peers) if peers else None
    steps = {}
    for label, spec in labels.items():
        torch.manual_seed(0)
        steps[label] = training_step(spec, case, grid, peers)
    times = timing.rounds(steps, payload['rounds'], payload['budget'])
    return ratio_summary(times, {f'{mine} / {peer}': (mine, peer) for mine in case.ours
                                 for peer in labels if peer not in case.ours})


def child_memory(payload: dict) -> dict:
    import torch
    torch.manual_seed(0)
    case = OP_CASES[payload['case']]
    peers = Path(payload['peers']) if payload['peers'] else None
    # one step on a small map first: the libraries' lazy workspaces (BLAS, thread pools, the C++
    # kernels) are not the op's memory; 'auto' takes the dense forms there, so the linear paths warm
    # up too
    for impl in ('torch', 'cpu', None):
        training_step(payload['spec'], case, WARM_UP_GRID, peers, impl)()
    return {
        'peak_mb': timing.peak_growth_mb(
            training_step(payload['spec'], case, payload['grid'], peers)
        )
    }


def child_models(payload: dict) -> dict:
    import torch

    from lab.bench.inference import build_model
    group = MODEL_GROUPS[payload['group']]
    images = torch.randn(1, 3, *payload['shape'])
    steps = {}
    for label, config in group.configs.items():
        torch.manual_seed(0)
        model = build_model(config)
        steps[label] = (lambda m: lambda: m._forward(images))(model)
        steps[f'{label} backbone'] = (lambda m: lambda: m.backbone(images))(model)
    with torch.no_grad():
        times = timing.rounds(steps, group.rounds)
    first = next(iter(group.configs))
    ratios = {}
    # each model against the first, each backbone against the first one's
    for label in group.configs:
        ratios[label] = (label, first)
        ratios[f'{label} backbone'] = (f'{label} backbone', f'{first} backbone')
    return ratio_summary(times, ratios)


def child_model_memory(payload: dict) -> dict:
    import torch

    from lab.bench.inference import build_model
    group = MODEL_GROUPS[payload['group']]
    model = build_model(group.configs[payload['label']])
    images = torch.randn(1, 3, *payload['shape'])
    with torch.no_grad():
        return {'peak_mb': timing.peak_growth_mb(lambda: model._forward(images))}


def measured_step(step) -> Dict[str, float]:
    """One call of a ``model_pairs.TrainingStep``: the bytes its forward saves for the backward
    (transient recomputed blocks not counted), the peak resident set's growth over the step (reset
    first) and its seconds."""
    from lab.bench.saved_tensors import saved_for_backward
    saved = []

    def measured() -> None:
        losses = []
        saved.append(saved_for_backward(lambda: losses.append(step.loss())))
        step.backward(losses.pop())

    start = time.perf_counter()
    peak = timing.peak_growth_mb(measured)
    return {'saved_mb': saved[0] / 2**20, 'peak_mb': peak, 'step_s': time.perf_counter() - start}


def child_train_pair(payload: dict) -> dict:
    """A pair of ``benchmark_models.py`` at one size, both in this process after a warm-up step
    each: parameters, one measured step each (order reversed every other size), ``macs`` of one
    image, then ``rounds`` more paired rounds."""
    import torch

    from lab.bench.model_pairs import PAIRS, TrainingStep, build_training_model, model_scope
    from mmvisattn.analysis.flops import tensor_forward
    from mmvisattn.utils import count_flops, count_parameters
    torch.manual_seed(0)
    pair = PAIRS[payload['pair']]
    models = {'project': build_training_model(pair.project, pair.deploy),
              'stock': build_training_model(pair.stock)}
    steps = {}
    for side, model in models.items():
        TrainingStep(model, payload['batch'], *payload['warm_up_shape'])()
        steps[side] = TrainingStep(model, payload['batch'], *payload['shape'])
    order = list(steps)[::-1] if payload['reverse'] else list(steps)
    result = {side: dict(params=count_parameters(models[side]),
                         **measured_step(steps[side])) for side in order}
    if payload['macs']:
        for side, model in models.items():
            forward = tensor_forward(model.eval(), model_scope(model), *payload['shape'])
            result[side]['gmacs'] = count_flops(forward)['total'] / 1e9
            model.train()
    if payload['rounds']:  # the measured steps are the first round
        times = timing.rounds(steps, payload['rounds'], warm_up=0)
        times = {side: [result[side]['step_s']] + times[side] for side in steps}
        result['time'] = ratio_summary(times, {'project / stock': ('project', 'stock')})
    return result


MEMORY_KINDS = ('memory', 'model_memory', 'train_pair')
CHILDREN = {'time': child_time, 'memory': child_memory, 'models': child_models,
            'model_memory': child_model_memory, 'train_pair': child_train_pair}


def in_child(kind: str, **payload) -> dict:
    """Run ``CHILDREN[kind](payload)`` in a process of its own (:func:`run_python`); a failure
    becomes ``{'error': ...}``."""
    from lab.bench.processes import run_python
    done = run_python(['-m', 'lab.bench.measure', json.dumps(dict(payload, kind=kind))])
    lines = [line for line in done.stdout.splitlines() if line.startswith('{')]
    if done.returncode or not lines:
        last = (done.stderr.strip().splitlines() or [f'exit code {done.returncode}'])[-1]
        return {'error': last[:200]}
    return json.loads(lines[-1])


M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024


def fixed_mmap_threshold() -> None:
    """glibc maps every block of 128 KiB or more on its own (``mallopt(M_MMAP_THRESHOLD)``), so the
    peak resident set follows the live tensors, not the allocator's history (timings keep the
    default)."""
    import ctypes
    ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def main(payload: str) -> None:
    import torch
    payload = json.loads(payload)
    if payload['kind'] in MEMORY_KINDS:
        fixed_mmap_threshold()
    torch.set_num_threads(payload['threads'])
    print(json.dumps(CHILDREN[payload.pop('kind')](payload)))


if __name__ == '__main__':
    main(sys.argv[1])
