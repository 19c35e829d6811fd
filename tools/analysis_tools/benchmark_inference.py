"""Inference latency of the deployable models: PyTorch eager beside ONNX Runtime (CPU, 1 and 2
threads), each project model beside its stock counterpart.

The tool's logic: :mod:`lab.bench.inference`."""
from lab.bench.inference import main

if __name__ == '__main__':
    main()
