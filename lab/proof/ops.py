"""The GPU proof: every op of mmvisattn on CUDA, in one command of a few minutes on a bare GPU
machine (torch, Triton and this repository; no OpenMMLab).

    make gpu-proof          # = python tools/analysis_tools/gpu_proof.py --out-dir
    work_dirs/gpu_proof
    python tools/analysis_tools/gpu_proof.py [--out-dir DIR] [--sections ...] [--budget SECONDS]
        [--cpu-smoke]

Sections:

* ``correctness``: every op x backend (and :mod:`lab.experimental` kernel) x dtype against the
  float64 reference, output and gradients, odd maps, batch 2 (:func:`mmvisattn.ops.check.compare`);
* ``races``: three backward passes on the same inputs agree to float32 rounding;
* ``autocast``: float16 under autocast with a 2^16-scaled loss: gradients finite and within the
  float32 run's bound;
* ``syncs``: a training step of each backend under ``set_sync_debug_mode('error')``;
* ``random_states``: generator states saved, loaded to the device and restored give the same draws;
* ``compile``: ``torch.compile`` of each op forward and backward: graph breaks and error against
  eager;
* ``benchmarks``: each op at the shipped layers' sizes in bfloat16, every backend and experimental
  kernel beside SDPA's flash backend: CUDA-event medians and peak memory, the fastest marked;
* ``crossovers``: each experimental dense form beside ``auto``'s choice on square maps of
  :data:`CROSSOVER_SIDES`; the largest token count where dense wins everywhere goes into the record.

Writes ``gpu_proof.json``, ``gpu_proof.md`` and ``record_proof.json`` into ``--out-dir``, prints the
record's judgement of :data:`lab.records.GOALS` and exits 1 when a check fails; what ``--budget``
leaves is reported as skipped. ``--cpu-smoke`` runs the same code on a CPU (Triton interpreted, the
host-read counter, ``aot_eager``) inside ``make test``. Without CUDA, or with too old a Triton, it
fails in one line.
"""
import argparse
import io
import json
import os
import platform
import random
import sys
import time
from datetime import date
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from lab.proof.report import (
    describe,
    faster_than_auto,
    first_line,
    mark_fastest,
    markdown,
    row_label,
)
from lab.records import crossover_rows, goals_table, measured_crossovers, proof_rows, record

SECTIONS = ('correctness', 'races', 'autocast', 'syncs', 'random_states', 'compile', 'benchmarks',
            'crossovers')
DTYPES = ('float32', 'float16', 'bfloat16')
RACE_BOUND = 1e-5  # three float32 backward passes differ only by the order of atomic additions
GRAD_SCALE = 2.0 ** 16
SDPA_ROW = 'SDPA (flash)'  # the baseline of every benchmark layer
BOUNDS = dict(float32=5e-3, float16=1e-2)  # of the compiled (float32) and autocast (float16) runs
# square maps of the crossover sweep (ripple's dense index: 8 N^2 bytes)
CROSSOVER_SIDES = (16, 24, 32, 48, 64, 100)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/gpu_proof'))
    parser.add_argument('--sections', nargs='+', default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument('--budget', type=float, default=420.0,
                        help='seconds after which sections are skipped')
    parser.add_argument('--repeats', type=int, default=10, help='timed runs per benchmark row')
    parser.add_argument('--cpu-smoke', action='store_true',
                        help='the same code on CPU at tiny sizes')
    return parser.parse_args(argv)


def preflight(cpu_smoke: bool) -> str:
    """The device to prove on, or one line naming what is missing."""
    if cpu_smoke:
        os.environ.setdefault('TRITON_INTERPRET', '1')  # before any kernel is defined
    import torch

    from mmvisattn.ops.utils.dispatch import old_triton
    reason = old_triton()
    if reason:
        raise SystemExit(f'error: the Triton kernels: {reason}')
    if not cpu_smoke and not torch.cuda.is_available():
        raise SystemExit('error: no CUDA device (torch.cuda.is_available() is False; torch '
                         f'{torch.__version__}); run it on a GPU machine, or --cpu-smoke for the '
                         'CPU run')
    return 'cpu' if cpu_smoke else 'cuda'


class Proof:
    """The run: device, sizes, timing and the report of every section."""

    def __init__(self, device: str, args: argparse.Namespace) -> None:
        import torch

        from lab.proof import cases

        # after preflight: the interpreter is chosen before a kernel is defined
        from mmvisattn.ops import check
        self.torch, self.cases, self.check, self.args = torch, cases, check, args
        self.device, self.smoke = device, args.cpu_smoke
        self.start = time.perf_counter()
        self.sections: Dict[str, Dict] = {}
        self.runnable: Dict[str, List[str]] = {}

    def test_size(self, case):
        return self.cases.smoke_size(case.check.test,
                                     case.smoke_dims) if self.smoke else case.check.test

    def shipped_sizes(self, case):
        """The benchmark layers and their sizes; the smoke shrinks every layer of an op to the same
        tiny size, so it times the first one only (the others would repeat it)."""
        if self.smoke:
            return {
                name: self.cases.smoke_size(size, case.smoke_dims)
                for name, size in list(case.shipped.items())[:1]
            }
        return dict(case.shipped)

    def leaves(self, make_inputs: Callable, size, dtype, seed: int = 0) -> List:
        """The tensors ``make_inputs`` (a case's ``inputs``) makes on the device, the floating ones
        leaves requiring gradients."""
        generator = self.torch.Generator().manual_seed(seed)
        tensors = make_inputs(size, self.device, getattr(self.torch, dtype), generator)
        return [t.requires_grad_() if t.is_floating_point() else t for t in tensors]

    def step(self, case, impl: str, size, leaves, upstream=None):
        """Output and gradients of one forward + backward of an implementation."""
        return self.check.gradients(lambda: case.call(impl, size, *leaves), leaves, upstream)

    def impls(self, case) -> List[str]:
        """The case's backends and experimental kernels that train here: a backend that cannot run
        on the device says so when asked (the unit tests check flex's CPU forward)."""
        from mmvisattn.ops.utils.dispatch import UnsupportedInput
        if case.op.name not in self.runnable:
            leaves = self.leaves(case.check.inputs, self.test_size(case), 'float32')
            self.runnable[case.op.name] = []
            for impl in case.impls:
                if self.smoke and impl in self.cases.CUDA_TRAINING_ONLY:
                    continue
                try:
                    with self.torch.no_grad():
                        case.call(impl, self.test_size(case), *leaves)
                except UnsupportedInput:
                    continue
                self.runnable[case.op.name].append(impl)
        return self.runnable[case.op.name]

    def backends(self, case) -> List[str]:
        return [impl for impl in self.impls(case) if impl in case.op.backends]

    def run(self) -> int:
        for name in SECTIONS:
            if name not in self.args.sections:
                continue
            if self.out_of_time():
                self.sections[name] = dict(skipped=f'out of time (--budget {self.args.budget:g} s)',
                                           rows=[])
                continue
            began = time.perf_counter()
            rows = getattr(self, name)()
            self.sections[name] = dict(seconds=round(time.perf_counter() - began, 1), rows=rows)
            print(f'{name}: {len(rows)} rows, {sum(not row.get("ok", True) for row in rows)} '
                  f'failed, {self.sections[name]["seconds"]} s', flush=True)
        print(*faster_than_auto(self.sections.get('benchmarks', {}).get('rows', [])), sep='\n',
              flush=True)
        for op, tokens in sorted(measured_crossovers(crossover_rows(self.sections)).items()):
            print(f'{op}: the dense form was faster up to {tokens} tokens on '
                  f'{device_name(self.device)}', flush=True)
        return 1 if self.failures() else 0

    def failures(self) -> List[str]:
        return [f'{name}: {row_label(row)}' for name, section in self.sections.items()
                for row in section['rows'] if not row.get('ok', True)]

    def correctness(self) -> List[Dict]:
        rows = []
        for case in self.cases.CASES:
            size = self.test_size(case)
            for impl in self.impls(case):
                for dtype in DTYPES:
                    row = dict(op=case.op.name, impl=impl, dtype=dtype)
                    try:
                        leaves = self.leaves(case.check.inputs, size, dtype)
                        out, grads = self.step(case, impl, size, leaves)
                        row.update(self.check.compare(case.check, size, leaves, [out, *grads],
                                                      dtype))
                    # a failure of an implementation is this row's finding
                    except Exception as error:
                        row.update(ok=False, error=first_line(error))
                    rows.append(row)
        return rows

    def races(self) -> List[Dict]:
        rows = []
        for case in self.cases.CASES:
            size = self.test_size(case)
            for impl in self.impls(case):
                leaves = self.leaves(case.check.inputs, size, 'float32')
                passes = [self.step(case, impl, size, leaves)[1] for _ in range(3)]
                spread = max(self.check.relative_error(later, first) for grads in passes[1:]
                             for later, first in zip(grads, passes[0]))
                rows.append(dict(op=case.op.name, impl=impl, spread=spread, bound=RACE_BOUND,
                                 ok=spread <= RACE_BOUND))
        return rows

    def autocast(self) -> List[Dict]:
        torch, rows = self.torch, []
        for case in self.cases.CASES:
            size = self.test_size(case)
            leaves = self.leaves(case.check.inputs, size, 'float32')
            _, expected = self.step(case, 'auto', size, leaves)
            with torch.autocast(self.device, dtype=torch.float16):
                half = [t.half() if t.is_floating_point() and case.activations
                        else t for t in leaves]
                out, impl = chosen(case, lambda: case.call('auto', size, *half))  # noqa: B023
            # a mean loss scaled as GradScaler scales it: 2^16 / N on each output
            scale = GRAD_SCALE / out.numel()
            grads = torch.autograd.grad(out, [t for t in leaves if t.requires_grad],
                                        self.check.upstream_like(out).float().mul(scale).to(out.dtype))
            finite = all(bool(g.isfinite().all()) for g in grads)
            error = max(self.check.relative_error(g / scale, e) for g, e in zip(grads, expected))
            rows.append(dict(op=case.op.name, impl=impl,
                             output_dtype=str(out.dtype).replace('torch.', ''),
                             finite=finite, error=error, bound=BOUNDS['float16'],
                             ok=finite and error <= BOUNDS['float16']))
        return rows

    def syncs(self) -> List[Dict]:
        rows = []
        for case in self.cases.CASES:
            size = self.test_size(case)
            for impl in self.backends(case):
                leaves = self.leaves(case.check.inputs, size, 'float32')
                self.step(case, impl, size, leaves)  # warm-up: tables built and cached
                upstream = self.check.upstream_like(case.call(impl, size, *leaves))
                found = self.audited(
                    lambda: self.step(case, impl, size, leaves, upstream))  # noqa: B023
                rows.append(dict(op=case.op.name, impl=impl, host_syncs=found, ok=found == 'none'))
        return rows

    def audited(self, step: Callable[[], object]) -> str:
        """``'none'``, or the first synchronisation of ``step`` (CUDA's sync debug mode; on CPU the
        host reads a GPU would wait for)."""
        if self.device == 'cpu':
            from lab.step_audit import HostReadCounter
            with HostReadCounter() as reads:
                step()
            return 'none' if reads.total == 0 else reads.summary()
        self.torch.cuda.synchronize()
        self.torch.cuda.set_sync_debug_mode('error')
        try:
            step()
        except RuntimeError as error:
            return first_line(error)
        finally:
            self.torch.cuda.set_sync_debug_mode('default')
        return 'none'

    def random_states(self) -> List[Dict]:
        import numpy as np
        torch = self.torch
        from mmvisattn.utils.random_states import (
            capture_random_states,
            numpy_globals,
            restore_random_states,
        )

        def draws():
            values = [random.random(), float(np.random.rand()), torch.rand(3).tolist()]
            return values + ([torch.rand(3, device='cuda').tolist()] if self.device == 'cuda'
                             else [])
        torch.rand(1, device=self.device)  # the CUDA generator initialised, as in training
        buffer = io.BytesIO()
        torch.save(dict(random_states=[capture_random_states()]), buffer)
        expected = draws()
        buffer.seek(0)
        with torch.serialization.safe_globals(numpy_globals()):
            states = torch.load(buffer, map_location=self.device)['random_states'][0]
        restore_random_states(states)
        same = draws() == expected
        return [dict(generators=', '.join(sorted(states)), mapped_to=self.device, same_draws=same,
                     ok=same)]

    def compile(self) -> List[Dict]:
        import logging
        torch, rows = self.torch, []
        torch._logging.set_logs(dynamo=logging.ERROR)  # the breaks are reported in the rows
        backend = 'aot_eager' if self.smoke else 'inductor'
        for case in self.cases.CASES:
            size = self.test_size(case)
            leaves = self.leaves(case.check.inputs, size, 'float32')
            row = dict(op=case.op.name,
                       impl=chosen(case, lambda: case.call('auto', size, *leaves))[1],  # noqa: B023
                       backend=backend)
            torch._dynamo.reset()
            eager_out, eager_grads = self.step(case, 'auto', size, leaves)
            compiled = torch.compile(lambda *t: case.call('auto', size, *t),  # noqa: B023
                                     backend=backend)
            try:
                explained = torch._dynamo.explain(
                    lambda *t: case.call('auto', size, *t))(*leaves)  # noqa: B023
                row['graph_breaks'] = explained.graph_break_count
                row['break_reasons'] = sorted(
                    {first_line(b.reason) for b in explained.break_reasons}
                )
                out = compiled(*leaves)
                grads = torch.autograd.grad(out, [t for t in leaves if t.requires_grad],
                                            self.check.upstream_like(out))
            except Exception as error:  # a failure to trace or compile is this row's finding
                rows.append(dict(row, ok=False, error=first_line(error)))
                continue
            error = max(
                self.check.relative_error(a, b)
                for a, b in zip([out, *grads], [eager_out, *eager_grads])
            )
            rows.append(dict(row, error=error, bound=BOUNDS['float32'],
                             ok=error <= BOUNDS['float32']))
        return rows

    def out_of_time(self) -> bool:
        return time.perf_counter() - self.start > self.args.budget

    def benchmarks(self) -> List[Dict]:
        rows = []
        for case in self.cases.CASES:
            for layer, size in self.shipped_sizes(case).items():
                if self.out_of_time():
                    rows.append(dict(op=case.op.name, layer=layer, size=describe(size),
                                     skipped=f'out of time (--budget {self.args.budget:g} s)'))
                    continue
                leaves = self.leaves(case.check.inputs, size, 'bfloat16')
                auto = chosen(case, lambda: case.call('auto', size, *leaves))[1]  # noqa: B023
                layer_rows = [dict(op=case.op.name, layer=layer, size=describe(size), impl=impl,
                                   auto=impl == auto,
                                   **self.timed(lambda: case.call(impl, size, *leaves),  # noqa: B023
                                                leaves))
                              for impl in dict.fromkeys([auto, *self.impls(case)])]
                baseline = self.leaves(self.cases.baseline_inputs, size, 'bfloat16')
                layer_rows.append(dict(op=case.op.name, layer=layer, size=describe(size),
                                       impl=SDPA_ROW, auto=False,
                                       **self.timed(
                                           lambda: self.cases.flash_sdpa(*baseline),  # noqa: B023
                                           baseline)))
                rows += mark_fastest(layer_rows, SDPA_ROW)
        return rows

    def crossovers(self) -> List[Dict]:
        rows = []
        for case in self.cases.CASES:
            dense = case.dense
            if dense is None or dense not in self.impls(case):
                continue
            layer, size = next(iter(self.shipped_sizes(case).items()))
            shipped = self.leaves(case.check.inputs, size, 'bfloat16')
            linear = chosen(case, lambda: case.call('auto', size, *shipped))[1]  # noqa: B023
            for side in (3, 4) if self.smoke else CROSSOVER_SIDES:
                sized = size._replace(hw=(side, side))
                for impl in (dense, linear):
                    row = dict(op=case.op.name, layer=layer, size=describe(sized),
                               tokens=side * side, impl=impl, dense=impl == dense)
                    if self.out_of_time():
                        rows.append(dict(row,
                                         skipped=f'out of time (--budget {self.args.budget:g} s)'))
                        continue
                    leaves = self.leaves(case.check.inputs, sized, 'bfloat16')
                    timed = self.timed(lambda: case.call(impl, sized, *leaves),  # noqa: B023
                                       leaves)
                    rows.append(dict(row, **timed))
        return rows

    def timed(self, forward: Callable, leaves: Sequence) -> Dict:
        """Median forward and forward + backward ms, and the peak memory above the inputs (MB)."""
        torch = self.torch
        wanted = [t for t in leaves if t.requires_grad]
        try:
            with torch.no_grad():
                forward_ms = self.median_ms(forward)
            upstream = torch.ones_like(forward())
            both_ms = self.median_ms(lambda: torch.autograd.grad(forward(), wanted, upstream))
            memory = self.peak_mb(lambda: torch.autograd.grad(forward(), wanted, upstream))
        except Exception as error:  # an out-of-memory or refused size is this row's finding
            return dict(error=first_line(error))
        return dict(forward_ms=forward_ms, forward_backward_ms=both_ms, peak_mb=memory)

    def median_ms(self, run: Callable) -> float:
        """Median of ``--repeats`` timed runs after warm-up, fewer where one run takes over half a
        second (the torch paths at the largest maps), so a row stays within a few seconds."""
        from mmvisattn.analysis import timing
        warm_up = 1 if self.smoke else 3
        began = time.perf_counter()
        for _ in range(warm_up):
            run()
        per_run = (time.perf_counter() - began) / warm_up
        repeats = 1 if self.smoke else max(1, min(self.args.repeats, int(5.0 / max(per_run, 1e-6))))
        return round(timing.median_ms(run, repeats, warm_up=0, cuda=self.device == 'cuda'), 3)

    def peak_mb(self, run: Callable) -> Optional[float]:
        from mmvisattn.analysis import timing
        return round(timing.peak_growth_mb(run, cuda=True), 1) if self.device == 'cuda' else None


def chosen(case, call: Callable):
    """``call()``'s result and the backend ``auto`` chose for the case's op in it (the op's decision
    watched from outside)."""
    from mmvisattn.ops.utils.dispatch import recording_choices
    with recording_choices() as choices:
        out = call()
    return out, next(choice.chosen for choice in choices if choice.op is case.op)


def device_name(device: str) -> str:
    import torch
    return torch.cuda.get_device_name() if device == 'cuda' else f'CPU ({platform.machine()})'


def main(argv=None) -> int:
    args = parse_args(argv)
    device = preflight(args.cpu_smoke)
    import torch

    from mmvisattn.ops.utils.machine import installed_triton
    proof = Proof(device, args)
    status = proof.run()
    meta = dict(device_name=device_name(device),
                date=date.today().isoformat(), torch=torch.__version__, cuda=torch.version.cuda,
                triton='.'.join(map(str, installed_triton())),
                python=platform.python_version(), cpu_smoke=args.cpu_smoke,
                seconds=round(time.perf_counter() - proof.start, 1), failures=proof.failures())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / 'gpu_proof.json').write_text(
        json.dumps(dict(meta=meta, sections=proof.sections), indent=1)
    )
    (args.out_dir / 'gpu_proof.md').write_text(markdown(meta, proof.sections))
    rows = proof_rows(proof.sections, SDPA_ROW)
    data = record('proof', meta['device_name'], rows, False,
                  crossovers=crossover_rows(proof.sections))
    (args.out_dir / 'record_proof.json').write_text(json.dumps(data))
    print(*goals_table(data), sep='\n')
    print(f'wrote {args.out_dir / "gpu_proof.md"} and gpu_proof.json; {len(meta["failures"])} '
          'failed checks')
    for failure in meta['failures']:
        print(f'FAILED {failure}', file=sys.stderr)
    return status


if __name__ == '__main__':
    sys.exit(main())
