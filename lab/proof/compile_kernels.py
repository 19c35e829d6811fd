"""Compile every Triton kernel of ``mmvisattn.ops`` ahead of time for named GPU architectures,
without a GPU, at every configuration the shipped models launch.

    python tools/analysis_tools/compile_kernels.py [--arch sm_80 sm_90] [--dtypes float32 float16
        bfloat16] [--configs CONFIG ...] [--out-dir DIR]

* **Kernels**: every ``triton.jit`` function of ``mmvisattn.ops``, discovered.
* **Launches**: recorded from the models (every config, plus DeiT-Ripple and PerViT-M): each
  distinct attention with a Triton backend runs forward and backward with ``impl='triton'`` on CPU
  at two grids per dtype (half under autocast and as a half model), ``JITFunction.run`` replaced by
  a recorder, so Triton's binder gives each launch's signature, constexprs and specialisation;
  kernels with float scalars also compile with them ``fp64``, as inductor passes them.
* **Compilation**: ``triton.compile`` per distinct launch to cubin in a fresh cache; ptxas's report
  gives registers and spills, the metadata shared memory, the IR each ``tl.dot``'s operand dtype.

Prints a table, writes ``kernels.json`` into ``--out-dir`` and exits 1 on a failed compile, shared
memory over the limit, spills, or a kernel no launch reached. ``TRITON_INTERPRET`` is unset before
triton loads; a Triton older than 3.6 is refused in one line.
"""
import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import pkgutil
import re
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple
from unittest import mock

# Largest shared memory one block may use, bytes (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability": the opt-in maximum per block).
SHARED_MEMORY_LIMITS = {'sm_75': 65536, 'sm_80': 166912, 'sm_86': 101376, 'sm_87': 166912,
                        'sm_89': 101376, 'sm_90': 232448}
DTYPES = ('float32', 'float16', 'bfloat16')
GRIDS = ((16, 16), (13, 11))  # token counts divisible by 16 and not: both specialisations
# Backbones whose sizes the papers give but which no detection or segmentation config builds
EXTRA_MODELS = {'DeiT-Ripple': dict(type='DeiTRipple'),
                'PerViT-M': dict(type='PerViT', arch='medium')}


def _position_op():
    from mmvisattn.ops.peripheral import POSITION_OP
    return POSITION_OP


def _aux_op():
    from mmvisattn.ops.masked_softmax import OP
    return OP


# the attentions' attributes that name the backend of a further op (imported late: the interpreter
# is unset first)
OP_ARGUMENTS = {'position_impl': _position_op, 'aux_impl': _aux_op}


# what JITFunction.run passes from triton.knobs.compilation to the compiler, where present
RUN_KNOBS = ('instrumentation_mode', 'fpsan_homomorphic_casts')


def unsupported_triton() -> Optional[str]:
    """Why the installed Triton's launch path is not the one :class:`LaunchRecorder` follows
    (``triton.knobs`` and ``JITFunction._pack_args``), or ``None``."""
    import triton
    from triton.runtime.jit import JITFunction
    if importlib.util.find_spec('triton.knobs') is None or not hasattr(JITFunction, '_pack_args'):
        return (f'Triton {triton.__version__} launches kernels without triton.knobs and '
                'JITFunction._pack_args, '
                'the launch path this tool records (Triton 3.6 and 3.9 have both)')
    return None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--arch', nargs='+', default=['sm_80', 'sm_90'],
                        help=f'GPU architectures, of {", ".join(SHARED_MEMORY_LIMITS)}')
    parser.add_argument('--dtypes', nargs='+', default=list(DTYPES), help=f'of {", ".join(DTYPES)}')
    parser.add_argument('--configs', nargs='+', type=Path,
                        help='configs whose models are recorded (default: every config of configs/ '
                        f'and the backbones {", ".join(EXTRA_MODELS)})')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/compile_kernels'))
    args = parser.parse_args(argv)
    unknown = [arch for arch in args.arch if arch not in SHARED_MEMORY_LIMITS]
    if unknown:
        parser.error(f'unknown --arch {" ".join(unknown)}; known: {" ".join(SHARED_MEMORY_LIMITS)}')
    unknown = [dtype for dtype in args.dtypes if dtype not in DTYPES]
    if unknown:
        parser.error(f'unknown --dtypes {" ".join(unknown)}; known: {" ".join(DTYPES)}')
    missing = [str(path) for path in args.configs or () if not path.is_file()]
    if missing:
        parser.error(f'config file not found: {" ".join(missing)}')
    return args


def discover_kernels() -> Dict[str, object]:
    """``{module.name: JITFunction}`` of every ``triton.jit`` function in ``mmvisattn.ops``."""
    from triton.runtime.jit import JITFunction

    import mmvisattn.ops
    kernels = {}
    for info in pkgutil.walk_packages(mmvisattn.ops.__path__, 'mmvisattn.ops.'):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, JITFunction) and value.fn.__module__ == info.name:
                kernels[f'{info.name}.{name}'] = value
    return kernels


@dataclass
class Launch:
    """One specialisation of a kernel as a GPU launch would compile it, and the first workload
    (model, attention, dtype) that made it."""
    kernel: object
    arch: str
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict
    source: str
    dtype: str

    @property
    def name(self) -> str:
        return f'{self.kernel.fn.__module__}.{self.kernel.fn.__name__}'


class LaunchRecorder:
    """Within ``recorder.recording(workload, dtype)`` every ``kernel[grid](...)`` becomes
    :class:`Launch` records, one per architecture, and nothing runs."""

    def __init__(self, archs: Sequence[str]) -> None:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        self.targets = {arch: GPUTarget('cuda', int(arch[3:]), 32) for arch in archs}
        self.backends = {arch: make_backend(target) for arch, target in self.targets.items()}
        self.launches: Dict[str, Launch] = {}
        self._source, self._dtype = '', ''

    @contextlib.contextmanager
    def recording(self, source: str, dtype: str) -> Iterator[None]:
        """Record every launch inside instead of running it (``JITFunction.run`` replaced for the
        block only, as a test double)."""
        from triton.runtime.jit import JITFunction

        from mmvisattn.ops.utils.dispatch import observing
        self._source, self._dtype = source, dtype

        def record(kernel, *args, grid, warmup, **kwargs) -> None:
            self.add(kernel, args, kwargs)

        # the named kernels past the check that they run on CUDA
        def triton_on_cpu(op, impl, request):
            return op.backends[impl].function if impl == 'triton' else None

        with mock.patch.object(JITFunction, 'run', record), observing(triton_on_cpu):
            yield

    def add(self, kernel, args: tuple, kwargs: dict) -> None:
        from triton import knobs
        from triton.runtime.jit import create_function_from_signature
        # the options JITFunction.run adds from this Triton release's compilation knobs
        knobbed = {name: getattr(knobs.compilation, name) for name in RUN_KNOBS
                   if hasattr(knobs.compilation, name)}
        kwargs = dict(kwargs, debug=kwargs.get('debug', kernel.debug) or knobs.runtime.debug,
                      **knobbed)
        for arch, backend in self.backends.items():
            binder = create_function_from_signature(kernel.signature, kernel.params, backend)
            bound, specialization, options = binder(*args, **kwargs)
            options, signature, constexprs, attrs = kernel._pack_args(
                backend, kwargs, bound, specialization, options
            )
            launch = Launch(kernel, arch, signature, constexprs, attrs, options.__dict__,
                            self._source, self._dtype)
            key = repr((launch.name, arch, signature, sorted(constexprs.items(), key=repr),
                        sorted(attrs.items(), key=repr), sorted(options.__dict__.items())))
            self.launches.setdefault(key, launch)


def as_inductor_passes(launches: Iterable[Launch]) -> List[Launch]:
    """Each (kernel, arch)'s first launch with ``fp32`` scalars retyped ``fp64``, as inductor passes
    Python floats (a promoted block fails ``tl.dot`` there)."""
    firsts = {}
    for launch in launches:
        if 'fp32' in launch.signature.values():
            firsts.setdefault((launch.name, launch.arch), launch)
    return [replace(launch, source='torch.compile', signature={
        name: 'fp64' if kind == 'fp32' else kind for name, kind in launch.signature.items()})
        for launch in firsts.values()]


def config_models(paths: Optional[Sequence[Path]]) -> Iterator[Tuple[str, object]]:
    """``(name, model)`` of each config (default: every shipped one) and :data:`EXTRA_MODELS`."""
    from mmvisattn.configs import config_file, model_configs
    from mmvisattn.registry import build_from_config, models_of_scope
    if paths is None:
        paths = [config_file(name) for name in model_configs()]
        for name, backbone in EXTRA_MODELS.items():
            yield name, models_of_scope('mmdet').build(backbone)
    for path in paths:
        try:
            model = build_from_config(str(path))
        except Exception as exc:  # a file that is not a model config: one line naming it
            raise SystemExit(
                f'error: cannot build the model of {path}: {type(exc).__name__}: '
                f'{str(exc).strip().splitlines()[0] if str(exc).strip() else ""}'
            ) from None
        yield str(path), model


def record_widest_heads(recorder: LaunchRecorder, dtypes: Sequence[str]) -> None:
    """Each attention type with a Triton backend at the widest head its op accepts (the powers of
    two from ``MAX_HEAD_DIMS`` down, until the op's own check lets one through)."""
    from mmvisattn.ops.utils.dispatch import UnsupportedInput
    from mmvisattn.ops.utils.triton_launch import MAX_HEAD_DIMS
    from mmvisattn.registry import ATTENTIONS, build_attention
    for name in sorted(ATTENTIONS.module_dict):
        if not triton_impls(build_attention(dict(type=name), embed_dims=16, num_heads=1)):
            continue
        for width in (MAX_HEAD_DIMS >> shift for shift in range(MAX_HEAD_DIMS.bit_length())):
            attn = build_attention(dict(type=name), embed_dims=width, num_heads=1)
            try:
                record_attention(recorder, f'{name}: widest head {width}', attn, attn, dtypes)
                break
            except UnsupportedInput:
                continue


def triton_attentions(models: Iterator[Tuple[str, object]]) -> Iterator[Tuple[str, object, object]]:
    """``(source, attention, model)`` of the distinct attentions with a Triton implementation; the
    model owns what they share, so dtypes change on it."""
    from mmvisattn.models.attentions import BaseAttention
    seen = set()
    for name, model in models:
        for module in model.modules():
            if not isinstance(module, BaseAttention) or not triton_impls(module):
                continue
            settings = tuple(sorted((k, v) for k, v in vars(module).items()
                                    if isinstance(v, (int, float, str, bool, tuple))
                                    and k != 'training'))
            key = (type(module).__name__, settings)
            if key not in seen:
                seen.add(key)
                yield (f'{name}: {type(module).__name__}({module.embed_dims}, '
                       f'heads={module.num_heads})', module, model)


def triton_impls(attn) -> List[str]:
    """The attributes of an attention that name the backend of an op with a Triton backend: ``impl``
    for its own op, and those of :data:`OP_ARGUMENTS` it has."""
    names = ['impl'] if 'triton' in getattr(attn, 'impls', ()) else []
    for name, op in OP_ARGUMENTS.items():
        if hasattr(attn, name) and 'triton' in op().backends:
            names.append(name)
    return names


def record_attention(recorder: LaunchRecorder, source: str, attn, model,
                     dtypes: Sequence[str]) -> None:
    """Forward and backward of ``attn`` with each Triton-backed op (:func:`triton_impls`) at
    :data:`GRIDS` per dtype."""
    import torch
    for name in triton_impls(attn):
        setattr(attn, name, 'triton')
    attn.train()
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        variants = (
            [(torch.float32, False)]
            if dtype == torch.float32
            else [(torch.float32, True), (dtype, False)]
        )
        for weights_dtype, autocast in variants:
            model.to(weights_dtype)
            for grid in GRIDS:
                x = torch.randn(2, attn.num_extra_tokens + grid[0] * grid[1], attn.embed_dims,
                                dtype=weights_dtype, requires_grad=True)
                with recorder.recording(source,
                                        dtype_name), torch.autocast('cpu', dtype, enabled=autocast):
                    attn(x, grid).float().sum().backward()
    model.to(torch.float32)


PTXAS_REGISTERS = re.compile(r'Used (\d+) registers')
PTXAS_SPILLS = re.compile(r'(\d+) bytes spill stores, (\d+) bytes spill loads')
# a product of the IR: ``tt.dot %a, %b, %acc ... : tensor<MxKxbf16> * tensor<KxNxbf16> -> ...``
TTIR_DOT = re.compile(r'tt\.dot .*?: tensor<(?:\d+x)+(\w+)> \* tensor<(?:\d+x)+(\w+)>')


def compile_launch(launch: Launch, target) -> dict:
    """Compile one launch; the row of the report."""
    import triton
    from triton import knobs
    from triton.compiler import ASTSource
    names = launch.kernel.arg_names
    row = dict(
        kernel=launch.name,
        arch=launch.arch,
        dtype=launch.dtype,
        source=launch.source,
        signature={k: v for k, v in launch.signature.items() if v != 'constexpr'},
        constexprs={
            names[k[0]]: v
            for k, v in launch.constexprs.items()
            if isinstance(v, (int, bool, float))
        },
        num_warps=launch.options['num_warps'],
        num_stages=launch.options['num_stages'],
    )
    knobs.nvidia.dump_ptxas_log = True  # ptxas -v's report, printed by Triton on stdout
    log = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(ASTSource(launch.kernel, launch.signature, launch.constexprs,
                                                launch.attrs),
                                      target=target, options=launch.options)
    # a compile error of any kind is this tool's finding, reported per launch
    except Exception as exc:
        row.update(error=f'{type(exc).__name__}: {error_lines(exc)}')
        return row
    row['compile_s'] = round(time.perf_counter() - start, 2)
    registers, spills = PTXAS_REGISTERS.search(log.getvalue()), PTXAS_SPILLS.search(log.getvalue())
    row.update(
        shared_bytes=compiled.metadata.shared,
        registers=int(registers.group(1)) if registers else None,
        spill_bytes=int(spills.group(1)) + int(spills.group(2)) if spills else None,
        called=sorted(set(re.findall(r'tt\.call @([\w.]+?)__', compiled.asm['source']))),
        dot_operands=sorted(
            {kind for pair in TTIR_DOT.findall(compiled.asm['ttir']) for kind in pair}
        ),
    )
    return row


def error_lines(exc: Exception) -> str:
    """An exception in one line: Triton's compile errors give the place first (``at 22:8:``), then
    the source line, then the message; the place and the message are kept."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return ' '.join(dict.fromkeys(lines[:1] + lines[-1:]))


def problems(row: dict) -> List[str]:
    found = []
    if 'error' in row:
        return [row['error']]
    if row['shared_bytes'] > SHARED_MEMORY_LIMITS[row['arch']]:
        found.append(f'shared memory {row["shared_bytes"]} B > {SHARED_MEMORY_LIMITS[row["arch"]]} '
                     'B')
    if row['registers'] is None or row['spill_bytes'] is None:
        found.append('no ptxas report (registers, spills) was read')
    elif row['spill_bytes']:
        found.append(f'{row["spill_bytes"]} bytes of register spills')
    return found


def unreached(kernels: Dict[str, object], rows: List[dict]) -> List[str]:
    """Kernels of the package that were neither launched nor called from a launched kernel."""
    reached = {row['kernel'] for row in rows} | {
        name for row in rows for name in row.get('called', ())
    }
    return sorted(name for name in kernels if name not in reached)


def short(name: str) -> str:
    return name.replace('mmvisattn.ops.', '')


def format_table(rows: List[dict]) -> str:
    header = ('kernel', 'arch', 'dtype', 'tensors', 'dots', 'blocks', 'warps', 'shared B', 'regs',
              'spills', 'compile s', 'status')
    lines = []
    for row in rows:
        blocks = ' '.join(f'{k}={v}' for k, v in row['constexprs'].items() if k.startswith('BLOCK'))
        tensors = '+'.join(sorted({v[1:] for v in row['signature'].values() if v.startswith('*')}))
        dots = '+'.join(row.get('dot_operands', ())) or '-'
        lines.append((short(row['kernel']), row['arch'], row['dtype'], tensors, dots, blocks,
                      str(row['num_warps']),
                      str(row.get('shared_bytes', '-')), str(row.get('registers', '-')),
                      str(row.get('spill_bytes', '-')), str(row.get('compile_s', '-')),
                      '; '.join(row['problems']) or 'ok'))
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
    return '\n'.join(
        '  '.join(cell.ljust(width) for cell, width in zip(line, widths))
        for line in [header, *lines]
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.environ.get('TRITON_INTERPRET', '0') not in ('', '0'):
        sys.exit('error: TRITON_INTERPRET is set, so the kernels are interpreted ones; run '
                 'tools/analysis_tools/compile_kernels.py, which unsets it before triton loads')
    reason = unsupported_triton()
    if reason is not None:
        sys.exit(f'error: {reason}')
    with tempfile.TemporaryDirectory() as cache:
        os.environ['TRITON_CACHE_DIR'] = cache  # a fresh cache: every launch is really compiled
        import mmvisattn  # noqa: F401  (registers the models)
        kernels = discover_kernels()
        recorder = LaunchRecorder(args.arch)
        for source, attn, model in triton_attentions(config_models(args.configs)):
            record_attention(recorder, source, attn, model, args.dtypes)
        record_widest_heads(recorder, args.dtypes)
        rows = []
        for launch in [*recorder.launches.values(),
                       *as_inductor_passes(recorder.launches.values())]:
            row = compile_launch(launch, recorder.targets[launch.arch])
            row['problems'] = problems(row)
            rows.append(row)
    rows.sort(key=lambda r: (r['kernel'], r['arch'], r['dtype'], sorted(r['constexprs'].items())))
    print(format_table(rows))
    missing = unreached(kernels, rows)
    failed = [row for row in rows if row['problems']]
    worst = max((row for row in rows if 'shared_bytes' in row), key=lambda r: r['shared_bytes'],
                default=None)
    summary = dict(kernels_found=len(kernels), kernels_unreached=missing, launches=len(rows),
                   failed=len(failed), worst_shared_bytes=worst and worst['shared_bytes'],
                   worst_shared_kernel=worst and worst['kernel'],
                   max_registers=max((row.get('registers') or 0 for row in rows), default=0),
                   spilling=sum(1 for row in rows if row.get('spill_bytes')))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    settings = dict(arch=args.arch, dtypes=args.dtypes,
                    configs=[str(p) for p in args.configs or ()])
    (args.out_dir / 'kernels.json').write_text(
        json.dumps(dict(settings=settings, summary=summary, rows=rows), indent=1, default=str)
    )
    print(f'{len(kernels)} kernels in mmvisattn.ops, {len(rows)} compiled launches, {len(failed)} '
          f'failed; largest shared memory {summary["worst_shared_bytes"]} B '
          f'({short(summary["worst_shared_kernel"] or "-")}), '
          f'most registers {summary["max_registers"]}, {summary["spilling"]} spilling; '
          f'wrote {args.out_dir / "kernels.json"}')
    if missing:
        print(f'error: kernels no launch reached: {", ".join(map(short, missing))}',
              file=sys.stderr)
    if failed:
        print(
            f'error: {len(failed)} launches failed: '
            + '; '.join(
                f'{short(r["kernel"])} {r["arch"]} {r["dtype"]}: {r["problems"][0]}'
                for r in failed[:5]
            ),
            file=sys.stderr,
        )
    return 1 if missing or failed else 0


if __name__ == '__main__':
    sys.exit(main())
