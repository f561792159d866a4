"""Checkpoints of other Swin implementations in the keys of ckptzoo's (mmdet's) Swin."""
from collections import OrderedDict

__all__ = ['convert_official_swin', 'unfold_order_weight', 'unfold_order_vector']


def unfold_order_weight(w):
    """torchvision / original Swin patch-merging input order -> mmcv's unfold order."""
    out_c, in_c = w.shape
    return w.reshape(out_c, 4, in_c // 4)[:, [0, 2, 1, 3], :].transpose(1, 2).reshape(out_c, in_c)


def unfold_order_vector(v):
    return v.reshape(4, -1)[[0, 2, 1, 3], :].transpose(0, 1).reshape(-1)


def convert_official_swin(state_dict):
    """An official Swin (V1) checkpoint's state dict in SwinTransformer's (mmdet's) keys, as
    mmdet 2.x's ``swin_converter`` + ``SwinTransformer.init_weights`` convert it.

    ``layers.i`` -> ``stages.i``; ``attn.*`` -> ``attn.w_msa.*``; ``mlp.fc1 / fc2`` ->
    ``ffn.layers.0.0 / ffn.layers.1``; ``patch_embed.proj`` -> ``patch_embed.projection``;
    patch merging ``reduction / norm`` reordered to mmcv's unfold order. A ``backbone.`` or
    ``module.`` prefix is stripped. Dropped: the classifier (``head.*``), the final ``norm.*``
    (mmdet ignores it too: each output has its own ``norm{i}``) and the derived ``attn_mask``
    buffers. ``absolute_pos_embed`` (ape models) is refused, as ``use_abs_pos_embed`` is.
    """
    if any(k.startswith(('backbone.', 'module.')) for k in state_dict):
        head = 'backbone.' if any(k.startswith('backbone.') for k in state_dict) else 'module.'
        state_dict = OrderedDict((k[len(head):], v) for k, v in state_dict.items()
                                 if k.startswith(head))
    if not any(k.startswith('layers.') for k in state_dict):
        raise ValueError('not an official Swin state dict: no layers.N.* keys (a torchvision '
                         "one needs convert_weights='torchvision'; mmdet's loads unconverted)")
    if 'absolute_pos_embed' in state_dict:
        raise NotImplementedError('absolute_pos_embed (use_abs_pos_embed=True) is not supported')
    out = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith(('head.', 'norm.')) or key.endswith('attn_mask'):
            continue
        if key.startswith('layers.'):
            key = key.replace('layers.', 'stages.', 1)
            if '.attn.' in key:
                key = key.replace('.attn.', '.attn.w_msa.', 1)
            elif '.mlp.fc1.' in key:
                key = key.replace('.mlp.fc1.', '.ffn.layers.0.0.', 1)
            elif '.mlp.fc2.' in key:
                key = key.replace('.mlp.fc2.', '.ffn.layers.1.', 1)
            elif '.downsample.reduction.' in key:
                value = unfold_order_weight(value)
            elif '.downsample.norm.' in key:
                value = unfold_order_vector(value)
        elif key.startswith('patch_embed.proj.'):
            key = key.replace('patch_embed.proj.', 'patch_embed.projection.', 1)
        out[key] = value
    return out
