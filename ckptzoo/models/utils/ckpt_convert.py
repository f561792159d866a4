"""Checkpoints of other implementations (official Swin, official PVT) in the keys of ckptzoo's
(mmdet's) backbones."""
from collections import OrderedDict

import torch

__all__ = ['convert_official_swin', 'unfold_order_weight', 'unfold_order_vector', 'pvt_convert']


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


def pvt_convert(state_dict):
    """An official PVT / PVTv2 checkpoint's state dict (``patch_embed{s}.proj``,
    ``block{s}.{j}.attn.q / kv / proj / sr / norm``, ``mlp.fc1 / dwconv.dwconv / fc2``,
    ``norm{s}``, ``pos_embed{s}``) in PyramidVisionTransformer's (mmdet's) keys, as mmdet 2.x's
    ``pvt_convert`` converts it.

    Stage ``s`` (1-based) -> ``layers.{s-1}``: ``patch_embed{s}.proj`` -> ``.0.projection``;
    ``pos_embed{s}`` -> ``.1.0.pos_embed`` (stage 4's class token dropped: 1 + 7 * 7 tokens);
    ``block{s}.{j}`` -> ``.1.{j + 1 if position embeddings else j}``, its ``q`` and ``kv``
    concatenated into ``attn.attn.in_proj_*``, ``proj`` -> ``attn.attn.out_proj``, the MLP's
    linears as 1x1 convs at ``ffn.layers.0`` and ``ffn.layers.4`` (``3`` without the
    depth-wise conv, which goes to ``ffn.layers.1``); ``norm{s}`` -> ``.2``. Dropped: the
    classifier ``head``, the final ``norm`` and ``cls_token``.
    """
    has_pos = any(k.startswith('pos_embed') for k in state_dict)
    has_dw = any('dwconv' in k for k in state_dict)
    out = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith(('head', 'norm.', 'cls_token')) or '.attn.kv.' in key:
            continue
        first, _, rest = key.partition('.')
        if first.startswith('pos_embed'):
            stage = int(first[len('pos_embed'):])
            if stage == 4 and value.shape[1] == 50:
                value = value[:, 1:]
            out[f'layers.{stage - 1}.1.0.pos_embed'] = value
        elif first.startswith('patch_embed'):
            stage = int(first[len('patch_embed'):])
            rest = 'projection.' + rest[len('proj.'):] if rest.startswith('proj.') else rest
            out[f'layers.{stage - 1}.0.{rest}'] = value
        elif first.startswith('block'):
            stage = int(first[len('block'):])
            index, _, rest = rest.partition('.')
            head = f'layers.{stage - 1}.1.{int(index) + has_pos}.'
            if rest.startswith('attn.q.'):
                param = rest[len('attn.q.'):]
                kv = state_dict[f'{first}.{index}.attn.kv.{param}']
                out[head + f'attn.attn.in_proj_{param}'] = torch.cat([value, kv], dim=0)
            elif rest.startswith('attn.proj.'):
                out[head + 'attn.attn.out_proj.' + rest[len('attn.proj.'):]] = value
            elif rest.startswith('mlp.'):
                name, _, param = rest[len('mlp.'):].rpartition('.')
                if name in ('fc1', 'fc2') and param == 'weight':
                    value = value.reshape(*value.shape, 1, 1)
                layer = {'fc1': 0, 'dwconv.dwconv': 1, 'fc2': 4 if has_dw else 3}[name]
                out[head + f'ffn.layers.{layer}.{param}'] = value
            else:
                out[head + rest] = value
        elif first.startswith('norm') and first[4:].isdigit():
            out[f'layers.{int(first[4:]) - 1}.2.{rest}'] = value
        else:
            out[key] = value
    return out
