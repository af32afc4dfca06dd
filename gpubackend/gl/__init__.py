"""What the three GL tiers (gles2, gles3, gles31) share: the context, program compilation and
caching, allocation and readback, each through the probe's fault-injection hooks."""

from .device import GLDevice, activation_defines

__all__ = ["GLDevice", "activation_defines"]
