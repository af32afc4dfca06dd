"""The segmentation demo (``gpubackend-demo``): see :mod:`gpubackend.demo.app`."""
