"""The hook ``gpu_proof_models.py`` adds to a model's config: what one run of ``tools/train.py`` or
``tools/test.py`` did on the device, as JSON in ``out_dir`` (``probe_train.json``,
``probe_test.json``).

Training: the first iteration, each iteration's loss and synchronised step time, and the peak
``max_memory_allocated`` from the start (the peak resident set on a CPU,
:mod:`mmvisattn.analysis.timing`). At iteration ``probe_iter``, with nothing that changes ``auto``'s
picks:

* every attention op call with the implementation that ran beside ``print_dispatch.py``'s, the input
  dtype and size;
* on CUDA, the backbone's forward under ``torch.cuda.set_sync_debug_mode('warn')`` and the step's
  synchronisations from the profiler, each host read attributed to the innermost frame of the
  project or OpenMMLab.

On a CPU the two steps after it run under :class:`HostReadCounter`, the second one's reads kept, the
backbone's apart.

Testing: images per second after the first batch, and the metrics. ``memory_cap_mb`` caps the
process (CUDA: the allocator's fraction; CPU: the address space), so a proof can show running out of
memory.
"""
import json
import math
import numbers
import statistics
import time
import warnings
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from lab.bench.largest_input import cap_memory
from lab.step_audit import HOST_READ_OPS, HostReadCounter
from mmvisattn.analysis import timing

SYNC_EVENTS = ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize')
SYNC_WARNING = 'called a synchronizing CUDA operation'  # what the sync debug mode warns with
OUR_FRAMES = ('/mmvisattn/', '/mmdet/', '/mmseg/', '/mmengine/', '/mmcv/')


class OpCalls:
    """Every op call made while active as ``(layer, Choice)``, ``layer`` set by the caller; watched
    from outside (a dispatch mode would change ``auto``'s picks)."""

    def __init__(self) -> None:
        self.layer, self.calls = '', []

    def __enter__(self) -> 'OpCalls':
        from mmvisattn.ops.utils.dispatch import Choice, observing

        def record(op, impl, request) -> None:
            self.calls.append((self.layer, Choice(op, impl, request, op.choose(impl, request))))

        self.observing = observing(record)
        self.observing.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.observing.__exit__(*exc)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def watch(module, before: Callable, after: Optional[Callable]) -> Callable:
    """``before`` / ``after`` as forward hooks of ``module``; returns their remover."""
    handles = [module.register_forward_pre_hook(before)]
    if after is not None:
        handles.append(module.register_forward_hook(after))
    return lambda: [handle.remove() for handle in handles]


def profiled_syncs(profile) -> Dict[str, object]:
    """A profiled step's synchronisations: the runtime's waits (``runtime``) and the host reads of
    :data:`HOST_READ_OPS`, each by its innermost frame of the project or OpenMMLab (``by_line``)."""
    reading = {f'aten::{op.overloadpacket.__name__}' for op in HOST_READ_OPS}
    runtime, by_line = 0, Counter()
    for event in profile.events():
        if event.name in SYNC_EVENTS:
            runtime += 1
        elif event.name in reading:
            frames = [frame for frame in event.stack or []
                      if any(part in frame for part in OUR_FRAMES)]
            by_line[frames[0] if frames else f'{event.name} (no frame of ours)'] += 1
    return dict(runtime=runtime, host_reads=sum(by_line.values()),
                by_line=dict(by_line.most_common()))


@HOOKS.register_module()
class ModelProofProbe(Hook):
    """Records a training or test run for ``gpu_proof_models.py`` (module docstring)."""

    # after the optimizer step and the safeguards, before LoggerHook, whose log line resets the peak
    # of max_memory_allocated (mmengine's LogProcessor): the peak is read (and kept) before that
    priority = 'NORMAL'

    def __init__(self, out_dir: str, probe_iter: int = 3,
                 memory_cap_mb: Optional[float] = None) -> None:
        self.out_dir, self.probe_iter, self.memory_cap_mb = Path(out_dir), probe_iter, memory_cap_mb
        self.record: Dict = {}
        self.step_ms: List[float] = []
        self.losses: List[float] = []
        self.stack: Optional[ExitStack] = None
        self.start, self.peak_mb = 0.0, 0.0

    # training
    def before_train(self, runner) -> None:
        if self.memory_cap_mb is not None:
            cap_memory(self.memory_cap_mb)
        timing.reset_peak(torch.cuda.is_available())
        self.record = dict(mode='train', first_iter=runner.iter,
                           device='cuda' if torch.cuda.is_available() else 'cpu')
        self.write()

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        synchronize()  # before the recorders: the probe's own waits are not the step's
        step = runner.iter + 1 - self.record['first_iter']
        if step == self.probe_iter:
            self.stack = self.open_dispatch_probe(runner)
        elif step in (self.probe_iter + 1, self.probe_iter + 2) and not torch.cuda.is_available():
            self.stack = self.open_host_read_probe(runner)
        self.start = time.perf_counter()

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        probed = self.stack is not None
        if probed:
            self.stack.close()  # before the probe's own waits
            self.stack = None
        synchronize()
        self.step_ms.append((time.perf_counter() - self.start) * 1e3)
        if outputs and 'loss' in outputs:
            self.losses.append(float(torch.as_tensor(outputs['loss']).detach()))
        step = runner.iter + 1 - self.record['first_iter']
        if probed and step == self.probe_iter:
            self.close_dispatch_probe(runner)
        # the second step under the counter: caches built in the first
        elif probed and step == self.probe_iter + 2:
            self.close_host_read_probe()
        self.peak_mb = max(self.peak_mb, timing.peak_mb(torch.cuda.is_available()))
        self.record.update(last_iter=runner.iter + 1, step_ms=self.step_ms, losses=self.losses,
                           peak_mb=self.peak_mb)
        self.write()

    def after_train(self, runner) -> None:
        timed = self.step_ms[-10:]
        self.record.update(median_step_ms=statistics.median(timed) if timed else None,
                           finite_losses=all(math.isfinite(v) for v in self.losses), done=True)
        self.write()

    def open_dispatch_probe(self, runner) -> ExitStack:
        """The dispatch step's recorders (no dispatch mode): every op call, and on CUDA the backbone
        under the sync debug mode and the profiler."""
        from mmvisattn.models.attentions.base import BaseAttention
        stack = ExitStack()
        model = getattr(runner.model, 'module', runner.model)
        self.dispatch = stack.enter_context(OpCalls())
        for name, module in model.named_modules():
            if isinstance(module, BaseAttention):
                handle = module.register_forward_pre_hook(
                    lambda module, args, name=name: setattr(self.dispatch, 'layer', name))
                stack.callback(handle.remove)
        self.input_size = None
        if torch.cuda.is_available():
            caught = warnings.catch_warnings(record=True)
            self.sync_warnings: List = []

            def before(module, args):  # the mode set outside the capture: setting it warns too
                self.input_size = tuple(args[0].shape[-2:])
                torch.cuda.set_sync_debug_mode('warn')
                self.sync_warnings = caught.__enter__()
                warnings.simplefilter('always')

            def after(module, args, output):
                caught.__exit__(None, None, None)
                torch.cuda.set_sync_debug_mode(0)
            from torch.profiler import ProfilerActivity, profile
            self.profile = stack.enter_context(
                profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True)
            )
        else:
            def before(module, args):
                self.input_size = tuple(args[0].shape[-2:])
            after = None
        stack.callback(watch(model.backbone, before, after))
        return stack

    def close_dispatch_probe(self, runner) -> None:
        self.record['dispatch'] = self.dispatch_check(runner)
        if torch.cuda.is_available():
            syncs = [f'{w.filename}:{w.lineno}' for w in self.sync_warnings
                     if SYNC_WARNING in str(w.message)]
            self.record['backbone_syncs'] = dict(total=len(syncs), at=sorted(set(syncs)))
            self.record['profiled_syncs'] = profiled_syncs(self.profile)

    def open_host_read_probe(self, runner) -> ExitStack:
        """On a CPU: the step's host reads (the counter is a dispatch mode, so ``auto`` may pick
        otherwise), the backbone's forward told apart."""
        stack = ExitStack()
        model = getattr(runner.model, 'module', runner.model)
        self.reads = stack.enter_context(HostReadCounter())
        self.backbone_lines: Counter = Counter()

        def before(module, args):
            self.lines_before = Counter(self.reads.by_line)

        def after(module, args, output):
            self.backbone_lines += Counter(self.reads.by_line) - self.lines_before
        stack.callback(watch(model.backbone, before, after))
        return stack

    def close_host_read_probe(self) -> None:
        self.record['host_reads'] = dict(total=self.reads.total, **self.reads.as_dict())
        self.record['backbone_syncs'] = dict(total=sum(self.backbone_lines.values()),
                                             at=sorted(self.backbone_lines))

    def dispatch_check(self, runner) -> List[Dict]:
        """Each (layer, op) of the dispatch step: the implementation that ran and
        ``print_dispatch.py``'s, the input dtype and size."""
        from mmvisattn.analysis.print_dispatch import attention_requests, dispatch_rows
        calls = self.dispatch.calls
        if not calls:
            return []
        ran = {(layer, choice.op.name): choice.chosen for layer, choice in calls}
        named = {(row['layer'], row['op']): row['runs'] for row in
                 dispatch_rows(attention_requests(runner.cfg, self.input_size),
                               self.record['device'], calls[0][1].request.dtype)}
        return [dict(layer=layer, op=op, runs=impl, named=named.get((layer, op)),
                     ok=named.get((layer, op)) == impl)
                for (layer, op), impl in ran.items()]

    # testing
    def before_test(self, runner) -> None:
        self.record = dict(mode='test', images=0,
                           device='cuda' if torch.cuda.is_available() else 'cpu')

    def after_test_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self.record['images'] += len(outputs or ())
        # the first batch warms up (kernel compilation, cuDNN's choices): not timed
        if batch_idx == 0:
            synchronize()
            self.start, self.warm_up_images = time.perf_counter(), self.record['images']

    def after_test_epoch(self, runner, metrics: Optional[Dict[str, float]] = None) -> None:
        synchronize()
        seconds, timed = (time.perf_counter() - self.start,
                          self.record['images'] - self.warm_up_images)
        self.record.update(
            seconds=seconds,
            images_per_s=timed / seconds if timed else None,
            metrics={
                k: float(v) for k, v in (metrics or {}).items() if isinstance(v, numbers.Real)
            },
            done=True,
        )
        self.write()

    def write(self) -> None:
        """The record so far in ``out_dir/probe_<mode>.json`` (a crash keeps what was measured)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f'probe_{self.record["mode"]}.json'
        path.with_suffix('.partial').write_text(json.dumps(self.record, indent=1))
        path.with_suffix('.partial').replace(path)
