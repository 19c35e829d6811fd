#!/usr/bin/env bash
# Idempotent set-up of the pinned OpenMMLab stack in .venv (called by `make install`).
#
# mmcv 2.1.0 has no wheel for torch 2.13, so it is compiled once from the PyPI source
# (about 6 minutes on 2 cores) and the wheel is cached under $MMVISATTN_WHEEL_CACHE,
# keyed by torch version and Python tag; later installs reuse it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3.11}
VENV="$ROOT/.venv"
TORCH_VERSION=2.13.0
MMCV_VERSION=2.1.0
STAMP="$VENV/.mmvisattn-install-stamp"

die() { echo "make install: error: $*" >&2; exit 1; }

step_start=0
step() { step_start=$(date +%s); echo "==> $*"; }
done_step() { echo "    done in $(( $(date +%s) - step_start )) s"; }

check_toolchain() {
    command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found on PATH (Python 3.11 is required; set PYTHON=...)"
    local include
    include=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    [ -f "$include/Python.h" ] || die "Python headers missing: no Python.h in $include (install python3.11-dev)"
    command -v c++ >/dev/null || die "no C++ compiler on PATH (install g++); mmcv's ops must be compiled"
}

# Everything that decides the installed state; the stamp records it so a warm call is a no-op.
install_fingerprint() {
    cat "$ROOT/requirements/"*.txt "$ROOT/setup.py" "$ROOT/tools/install.sh" | sha256sum | cut -d' ' -f1
}

# pip warns about every local index folder that lacks a package; those lines are noise here.
venv_pip() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }; }

install_mmcv() {
    local py_tag cache wheel
    py_tag=$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    cache=${MMVISATTN_WHEEL_CACHE:-$HOME/.cache/mmvisattn/wheels}/torch$TORCH_VERSION-$py_tag
    wheel=$(ls "$cache"/mmcv-$MMCV_VERSION-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
        step "building mmcv $MMCV_VERSION with compiled ops (about 6 min on 2 cores) into $cache"
        mkdir -p "$cache"
        MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-2} venv_pip wheel --no-build-isolation --no-deps \
            -w "$cache" "mmcv==$MMCV_VERSION" || die "mmcv $MMCV_VERSION build failed (see the compiler output above)"
        wheel=$(ls "$cache"/mmcv-$MMCV_VERSION-*.whl | head -n 1)
        done_step
    else
        echo "==> using cached mmcv wheel $wheel"
    fi
    step "installing $(basename "$wheel")"
    venv_pip install --quiet --no-deps --force-reinstall "$wheel"
    done_step
}

verify_mmcv_ops() {
    step "checking that mmcv.ops holds compiled extensions (nms, RoIAlign)"
    "$VENV/bin/python" - <<'EOF' || die "mmcv.ops has no compiled extensions (mmcv._ext missing or broken); delete the cached wheel and run make install again"
import torch
from mmcv.ops import RoIAlign, nms
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]])
_, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
assert keep.tolist() == [0, 2], keep
feats = torch.arange(64.).view(1, 1, 8, 8)
out = RoIAlign((2, 2), spatial_scale=1.0, sampling_ratio=1)(feats, torch.tensor([[0., 0., 0., 4., 4.]]))
assert out.shape == (1, 1, 2, 2), out.shape
EOF
    done_step
}

# The ops' C++ CPU kernels compile on first use into torch's extension cache; compiling them here makes
# a compiler problem an install error and spares the first training step the wait.
compile_cpu_kernels() {
    step "compiling the ops' C++ CPU kernels (about 13 s each on 2 cores)"
    "$VENV/bin/python" -c 'from mmvisattn.ops.cpu_extension import load_every_cpu_kernel; load_every_cpu_kernel()' \
        || die "the ops' C++ CPU kernels did not compile (see the line above)"
    done_step
}

main() {
    local total_start fingerprint
    total_start=$(date +%s)
    check_toolchain
    fingerprint=$(install_fingerprint)
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$fingerprint" ]; then
        verify_mmcv_ops
        echo "==> .venv is up to date ($(( $(date +%s) - total_start )) s)"
        return
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        step "creating $VENV with $PYTHON"
        "$PYTHON" -m venv "$VENV"
        done_step
    fi
    step "installing build requirements (torch $TORCH_VERSION, setuptools<81, ninja)"
    venv_pip install --quiet -r "$ROOT/requirements/build.txt"
    done_step
    if ! "$VENV/bin/python" -c "import mmcv, sys; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" 2>/dev/null; then
        install_mmcv
    fi
    step "installing mmengine, mmdet, mmsegmentation, evaluation tools, triton, onnx(runtime) and mmvisattn (editable)"
    venv_pip install --quiet -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt" \
        -r "$ROOT/requirements/deploy.txt"
    venv_pip install --quiet --no-deps --no-build-isolation -e "$ROOT"
    done_step
    verify_mmcv_ops
    compile_cpu_kernels
    echo "$fingerprint" > "$STAMP"
    echo "==> install finished in $(( $(date +%s) - total_start )) s"
}

main "$@"
