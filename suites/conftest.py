"""The suites are sized for the device the fusion fixture uses (see sizes.py)."""
from pytest_fusion import machine, settings
from suites import sizes


def pytest_configure(config):
    device = machine.resolve_device(settings.from_config(config).device)
    sizes.DEVICE = device.type if device is not None else "cuda"
