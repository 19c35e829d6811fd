#!/usr/bin/env bash
# Sourced by the launch scripts: sets PYTHON to the interpreter that runs the tools. In order:
# $PYTHON when set, the project's .venv (made by `make install`) when it exists, else `python`.
if [ -z "${PYTHON:-}" ]; then
    venv_python="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python"
    if [ -x "$venv_python" ]; then PYTHON="$venv_python"; else PYTHON=python; fi
fi
