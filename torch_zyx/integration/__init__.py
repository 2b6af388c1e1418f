"""PyTorch integration: what makes ``zyx`` a PyTorch device.

The top of the flow, above dispatch: registration (registration.py), the device module
``torch.zyx`` (device_module.py), the C++ device guard and hooks (device_guard.py with
device_guard.cpp and device_hooks.cpp), autocast policies (autocast.py), storage copies and
``torch.load`` storages (storage.py), ``nn.Module`` conversions (module_conversion.py) and lazy
modules' placeholders (lazy_parameters.py). Modules here may import every later stage; no
stage imports them.
"""
