"""Every family's demo through mmdeploy's own tools/deploy.py and tools/test.py on ONNX Runtime
(export, parity, the metric both ways), and the deployed latency beside the stock models
(``make bench-deploy``).

The tool's logic: :mod:`lab.deploy_benchmark`."""
from lab.deploy_benchmark import main

if __name__ == '__main__':
    main()
