"""mmcv's ``auto_fp16`` / ``force_fp32`` / ``wrap_fp16_model``, on ``torch.autocast``.

mmcv cast weights and inputs to half by hand; here ``wrap_fp16_model`` only switches on
``fp16_enabled`` (and the autocast dtype) in the modules that declare it, and the decorated
methods run under ``torch.autocast`` on the device of their tensors, so weights stay fp32 (the
master copy) and BatchNorm / losses run in fp32 as autocast decides. Works on CPU and CUDA;
``dtype`` may be ``torch.float16`` or ``torch.bfloat16``.
"""
import functools

import torch
import torch.nn as nn

__all__ = ['auto_fp16', 'force_fp32', 'wrap_fp16_model', 'cast_tensor_type', 'DTYPES']

DTYPES = {'float16': torch.float16, 'fp16': torch.float16, 'half': torch.float16,
          'bfloat16': torch.bfloat16, 'bf16': torch.bfloat16}


def cast_tensor_type(inputs, src_type=None, dst_type=torch.float32):
    """Cast floating tensors (recursively in lists, tuples and dicts) to ``dst_type``."""
    if isinstance(inputs, torch.Tensor):
        if inputs.is_floating_point() and (src_type is None or inputs.dtype == src_type):
            return inputs.to(dst_type)
        return inputs
    if isinstance(inputs, dict):
        return type(inputs)((k, cast_tensor_type(v, src_type, dst_type))
                            for k, v in inputs.items())
    if isinstance(inputs, (list, tuple)) and not hasattr(inputs, '_fields'):
        return type(inputs)(cast_tensor_type(v, src_type, dst_type) for v in inputs)
    return inputs


def _device_type(module, args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor):
            return v.device.type
    for p in module.parameters():
        return p.device.type
    return 'cpu'


def _apply_to(func, apply_to, args, kwargs, fn):
    names = func.__code__.co_varnames[1:func.__code__.co_argcount]
    args = [fn(a) if apply_to is None or (i < len(names) and names[i] in apply_to) else a
            for i, a in enumerate(args)]
    kwargs = {k: fn(v) if apply_to is None or k in apply_to else v for k, v in kwargs.items()}
    return args, kwargs


def auto_fp16(apply_to=None, out_fp32=False, supported_types=(nn.Module, )):
    """Run the decorated method under autocast when its module's ``fp16_enabled`` is set.

    ``apply_to`` is accepted for mmcv compatibility: autocast decides per op what runs in low
    precision, so inputs are not cast by hand. ``out_fp32`` casts the outputs back to fp32.
    """

    def decorator(old_func):

        @functools.wraps(old_func)
        def new_func(self, *args, **kwargs):
            if not isinstance(self, supported_types):
                raise TypeError('@auto_fp16 can only decorate methods of '
                                f'{supported_types}, got {type(self)}')
            if not getattr(self, 'fp16_enabled', False):
                return old_func(self, *args, **kwargs)
            dtype = getattr(self, 'fp16_dtype', torch.float16)
            with torch.autocast(_device_type(self, args, kwargs), dtype=dtype):
                output = old_func(self, *args, **kwargs)
            return cast_tensor_type(output, dtype, torch.float32) if out_fp32 else output

        return new_func

    return decorator


def force_fp32(apply_to=None, out_fp16=False):
    """Run the decorated method in fp32 (autocast off, ``apply_to`` args cast to fp32)."""

    def decorator(old_func):

        @functools.wraps(old_func)
        def new_func(self, *args, **kwargs):
            if not getattr(self, 'fp16_enabled', False):
                return old_func(self, *args, **kwargs)
            dtype = getattr(self, 'fp16_dtype', torch.float16)
            args, kwargs = _apply_to(old_func, apply_to, args, kwargs,
                                     lambda v: cast_tensor_type(v, None, torch.float32))
            with torch.autocast(_device_type(self, args, kwargs), enabled=False):
                output = old_func(self, *args, **kwargs)
            return cast_tensor_type(output, torch.float32, dtype) if out_fp16 else output

        return new_func

    return decorator


def wrap_fp16_model(model, dtype=torch.float16):
    """Switch on ``fp16_enabled`` in every module that declares it (weights stay fp32)."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f'fp16 dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')
        dtype = DTYPES[dtype]
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f'fp16 dtype must be torch.float16 or torch.bfloat16, got {dtype!r}')
    for m in model.modules():
        if hasattr(m, 'fp16_enabled'):
            m.fp16_enabled = True
            m.fp16_dtype = dtype
    return model
