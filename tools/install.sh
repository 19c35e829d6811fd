#!/usr/bin/env bash
# Idempotent set-up of the pinned OpenMMLab stack in .venv (called by `make install`).
#
# mmcv 2.1.0 has no wheel for torch 2.13, so it is compiled once from the PyPI source
# (about 8 minutes on 2 cores) and the wheel is cached under $MMVISATTN_WHEEL_CACHE,
# keyed by torch version, Python tag and torch's CUDA version (or cpu): a wheel built
# without CUDA kernels is never reused by a CUDA torch. Later installs reuse it.
#
# MMVISATTN_VENV and MMVISATTN_PINS make another environment of the declared range: `make test-oldest` sets
# .venv-oldest and requirements/oldest.txt (pip constraints: torch, torchvision and the OpenMMLab releases), and
# MMVISATTN_MMCV_CUDA=0, which builds mmcv for the CPU only beside a CUDA build of torch.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3.11}
VENV=${MMVISATTN_VENV:-$ROOT/.venv}
PINS=${MMVISATTN_PINS:-$ROOT/requirements/pins.txt}
MMCV_VERSION=2.1.0
OPENMIM_VERSION=0.3.9
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
    { cat "$ROOT/requirements/"*.txt "$ROOT/setup.py" "$ROOT/tools/install.sh"; echo "$PINS ${MMVISATTN_MMCV_CUDA:-1}"; } \
        | sha256sum | cut -d' ' -f1
}

# pip warns about every local index folder that lacks a package; those lines are noise here.
venv_pip() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }; }

# The wheel cache of this venv's torch: torch<version>-<python tag>-<cu<version> or cpu> (cpu also where
# MMVISATTN_MMCV_CUDA=0 asks for a CPU build beside a CUDA torch).
mmcv_cache_dir() {
    local tags
    tags=$(MMCV_CUDA=${MMVISATTN_MMCV_CUDA:-1} "$VENV/bin/python" -c 'import os, sys, torch
cuda = torch.version.cuda if os.environ["MMCV_CUDA"] != "0" else None
print(torch.__version__.split("+")[0] + f"-cp{sys.version_info[0]}{sys.version_info[1]}-"
      + ("cu" + cuda.replace(".", "") if cuda else "cpu"))')
    echo "${MMVISATTN_WHEEL_CACHE:-$HOME/.cache/mmvisattn/wheels}/torch$tags"
}

cached_mmcv_wheel() {
    ls "$(mmcv_cache_dir)"/mmcv-$MMCV_VERSION-*.whl 2>/dev/null | head -n 1 || true
}

install_mmcv() {
    local cache wheel legacy
    cache=$(mmcv_cache_dir)
    wheel=$(cached_mmcv_wheel)
    # caches before the CUDA tag held CPU builds only: a CPU torch may take them over
    legacy=${cache%-cpu}
    if [ -z "$wheel" ] && [ "$legacy" != "$cache" ] && ls "$legacy"/mmcv-$MMCV_VERSION-*.whl >/dev/null 2>&1; then
        mkdir -p "$cache"
        mv "$legacy"/mmcv-$MMCV_VERSION-*.whl "$cache"/
        wheel=$(cached_mmcv_wheel)
    fi
    if [ -z "$wheel" ]; then
        step "building mmcv $MMCV_VERSION with compiled ops (about 8 min on 2 cores) into $cache"
        mkdir -p "$cache"
        # FORCE_CUDA: with a CUDA torch, the CUDA kernels are built even where no GPU is visible
        MMCV_WITH_OPS=1 FORCE_CUDA=$([[ $cache == *-cpu ]] && echo 0 || echo 1) MAX_JOBS=${MAX_JOBS:-2} \
            venv_pip wheel --no-cache-dir --no-build-isolation --no-deps -w "$cache" "mmcv==$MMCV_VERSION" \
            || die "mmcv $MMCV_VERSION build failed (see the compiler output above)"
        wheel=$(cached_mmcv_wheel)
        done_step
    else
        echo "==> using cached mmcv wheel $wheel"
    fi
    step "installing $(basename "$wheel")"
    venv_pip install --quiet --no-deps --force-reinstall "$wheel"
    done_step
}

# The source folder linked into the venv with setuptools' `develop` (an .egg-link), not pip's PEP 660
# editable wheel: mim looks for a package's files (`.mim/model-index.yml`, its configs and tools) in the
# folder named after it beside its metadata, which a PEP 660 install keeps in site-packages with no such
# folder (`mim search mmvisattn`: "FileNotFoundError: .../site-packages/mmvisattn/model-index.yml"); the
# egg-link's metadata lives in the source folder. A PEP 660 install of an earlier `make install` goes first.
install_editable() {
    if [ -d "$VENV/lib" ] && ls "$VENV"/lib/python*/site-packages/__editable__.mmvisattn-* >/dev/null 2>&1; then
        venv_pip uninstall --quiet --yes mmvisattn
    fi
    (cd "$ROOT" && "$VENV/bin/python" setup.py --quiet develop --no-deps >/dev/null 2>"$VENV/.develop.log") \
        || die "installing mmvisattn from $ROOT failed: $(tail -n 1 "$VENV/.develop.log")"
}

# nms and RoIAlign on CPU; where CUDA is available, also nms, RoIAlign and MultiScaleDeformableAttention on
# CUDA tensors (a CPU-only wheel would pass the CPU check and fail at the first CUDA op of training).
verify_mmcv_ops() {
    step "checking that mmcv.ops holds compiled kernels for every device here"
    "$VENV/bin/python" "$ROOT/tools/misc/check_mmcv_ops.py" --wheel "$(cached_mmcv_wheel)" \
        || exit 1
    done_step
}

# The ops' C++ CPU kernels compile on first use into torch's extension cache; compiling them here makes
# a compiler problem an install error and spares the first training step the wait.
compile_cpu_kernels() {
    step "compiling the ops' C++ CPU kernels (about 13 s each on 2 cores)"
    "$VENV/bin/python" -c 'from mmvisattn.ops.utils.cpu_extension import load_every_cpu_kernel; load_every_cpu_kernel()' \
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
    step "installing build requirements (torch of $(basename "$PINS"), setuptools<80, ninja)"
    venv_pip install --quiet -r "$ROOT/requirements/build.txt" -c "$PINS"
    done_step
    # always the build of this torch (cached: a second's reinstall), never an mmcv built against the torch before
    install_mmcv
    step "installing mmengine, mmdet, mmseg, mmpretrain, evaluation and export tools, mmdeploy, triton, openmim, sphinx, mmvisattn (editable)"
    venv_pip install --quiet -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt" \
        -r "$ROOT/requirements/docs.txt" -r "$ROOT/requirements/deploy.txt" -r "$ROOT/requirements/mim.txt" -c "$PINS"
    venv_pip install --quiet --no-deps "openmim==$OPENMIM_VERSION"
    venv_pip install --quiet --no-deps -r "$ROOT/requirements/mmdeploy.txt"
    install_editable
    done_step
    verify_mmcv_ops
    compile_cpu_kernels
    echo "$fingerprint" > "$STAMP"
    echo "==> install finished in $(( $(date +%s) - total_start )) s"
}

main "$@"
