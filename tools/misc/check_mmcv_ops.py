"""Does the installed mmcv hold compiled kernels for the ops the project's models call, on every
device of this machine? (``make install`` runs it after installing mmcv, and on every warm call.)

    python tools/misc/check_mmcv_ops.py --wheel WHEEL

On the CPU: ``nms`` and ``RoIAlign`` (a source build can finish without ``mmcv._ext``). Where CUDA
is available, also on CUDA tensors: ``nms``, ``RoIAlign`` and ``MultiScaleDeformableAttention``
(Mask R-CNN, Mask2Former and the DETR family), which a CPU-only wheel lacks: they would otherwise
fail at the first CUDA op of training. Exits 1 with one line naming the wheel, the device and the
op.
"""
import argparse
import sys
from typing import Callable, Dict, List, Optional

import torch


def check_nms(device: torch.device) -> None:
    from mmcv.ops import nms
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]],
                         device=device)
    _, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7], device=device), iou_threshold=0.5)
    assert keep.tolist() == [0, 2], keep


def check_roi_align(device: torch.device) -> None:
    from mmcv.ops import RoIAlign
    feats = torch.arange(64., device=device).view(1, 1, 8, 8)
    out = RoIAlign((2, 2), spatial_scale=1.0,
                   sampling_ratio=1)(feats, torch.tensor([[0., 0., 0., 4., 4.]],
                                                                                    device=device))
    assert out.shape == (1, 1, 2, 2), out.shape


def check_deformable_attention(device: torch.device) -> None:
    """The CUDA kernel of mmcv's ``MultiScaleDeformableAttention`` (on CPU it runs a torch
    fallback)."""
    from mmcv.ops import MultiScaleDeformableAttention
    attn = MultiScaleDeformableAttention(embed_dims=32, num_heads=2, num_levels=1, num_points=2,
                                         batch_first=True).to(device)
    query = torch.rand(1, 4, 32, device=device)
    value = torch.rand(1, 16, 32, device=device)
    out = attn(query, value=value, reference_points=torch.rand(1, 4, 1, 2, device=device),
               spatial_shapes=torch.tensor([[4, 4]], device=device),
               level_start_index=torch.tensor([0], device=device))
    assert out.shape == (1, 4, 32), out.shape


CHECKS: Dict[str, List[Callable[[torch.device], None]]] = dict(
    cpu=[check_nms, check_roi_align], cuda=[check_nms, check_roi_align, check_deformable_attention])


def machine_devices() -> List[str]:
    return ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])


def failure(device: str) -> Optional[str]:
    """The first check that fails on ``device``, named with its error's first line, or ``None``."""
    for check in CHECKS[device]:
        try:
            check(torch.device(device))
        # any failure of a compiled op is the finding, reported in one line
        except Exception as error:
            text = str(error).strip().splitlines()
            return (f'{check.__name__.removeprefix("check_")}: {type(error).__name__}: '
                    f'{text[0] if text else ""}')
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--wheel', default='the installed mmcv',
                        help='the wheel installed, for the message')
    parser.add_argument('--tool', default='make install',
                        help='the command that installed it, for the message')
    args = parser.parse_args(argv)
    for device in machine_devices():
        found = failure(device)
        if found is not None:
            print(
                f'{args.tool}: error: mmcv ({args.wheel}) has no working {device} kernels '
                f'({found}); delete the wheel and run {args.tool} again'
                + (' with the CUDA toolkit (nvcc) on PATH' if device == 'cuda' else ''),
                file=sys.stderr,
            )
            return 1
    print(f'mmcv ops run on {", ".join(machine_devices())}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
