"""mmcv 1.x's transformer bricks (``mmcv.cnn.bricks.transformer``): ``MultiheadAttention``,
``FFN``, ``BaseTransformerLayer``, ``TransformerLayerSequence``, with mmcv's registry names,
arguments, defaults and state-dict keys (``attentions.0.attn.in_proj_weight``,
``ffns.0.layers.0.0.weight``, ``norms.0.weight``, ``layers.3....``), so mmdet 2.x DETR-style
configs and checkpoints work unchanged.

Where mmcv is buggy the name stays and the behaviour is fixed:

- mmcv writes the deprecated ``MultiheadAttention(dropout=...)`` and
  ``BaseTransformerLayer(feedforward_channels=..., ffn_dropout=..., ffn_num_fcs=...)`` into its
  *default argument dicts*, so one such config changes every later module built without
  them. Here they go into a copy: each module gets what its own config says.
- Bad arguments (an unknown operation, attention configs not matching ``operation_order``,
  ``num_fcs < 2``, ...) fail with an error naming them (mmcv asserts).

Checkpoint units: every layer of a :class:`TransformerLayerSequence` is a unit ``layers.{i}``
(``encoder.layers.0``, ``decoder.layers.5``, ...), all of them one chain, so segments may span
layers. The query is the chain's state; everything else a layer reads (key, value, positional
encodings, masks, reference points, ...) goes in as the steps' outside tensors. The RNG is
replayed, so dropout recomputes identically.
"""
import copy
import warnings
from functools import partial

import torch
import torch.nn as nn

from ...registry import MODELS
from ...ops.multi_scale_deform_attn import MultiScaleDeformableAttention
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, chain_step
from .conv_module import build_activation_layer
from .drop import DropPath
from .norm import build_norm_layer
from .weight_init import apply_init_cfg

__all__ = ['MultiheadAttention', 'FFN', 'BaseTransformerLayer', 'TransformerLayerSequence',
           'build_dropout', 'build_attention', 'build_feedforward_network',
           'build_transformer_layer', 'build_transformer_layer_sequence', 'InitCfgMixin',
           'MultiScaleDeformableAttention']

OPERATIONS = ('self_attn', 'norm', 'ffn', 'cross_attn')


class InitCfgMixin:
    """mmcv ``BaseModule``'s ``init_weights``: this module's ``init_cfg``, then its children's
    ``init_weights`` (the parts here are built with their own defaults already)."""

    def init_weights(self):
        apply_init_cfg(self, getattr(self, 'init_cfg', None))
        for m in self.children():
            if hasattr(m, 'init_weights'):
                m.init_weights()


class _Dropout(nn.Dropout):
    """mmcv's ``Dropout(drop_prob)`` (registered as mmcv's DROPOUT_LAYERS 'Dropout')."""

    def __init__(self, drop_prob=0.5, inplace=False):
        super().__init__(p=drop_prob, inplace=inplace)


_DROPOUTS = {'Dropout': _Dropout, 'DropPath': DropPath}


def build_dropout(cfg):
    """mmcv's ``build_dropout``: ``dict(type='Dropout' | 'DropPath', drop_prob=...)``."""
    if not isinstance(cfg, dict) or cfg.get('type') not in _DROPOUTS:
        raise ValueError(f"dropout_layer must be a dict with type 'Dropout' or 'DropPath', "
                         f'got {cfg!r}')
    cfg = dict(cfg)
    return _DROPOUTS[cfg.pop('type')](**cfg)


def build_attention(cfg, default_args=None):
    return MODELS.build(cfg, default_args=default_args)


build_feedforward_network = build_transformer_layer = build_transformer_layer_sequence = \
    build_attention


@MODELS.register_module()
class MultiheadAttention(InitCfgMixin, nn.Module):
    """``torch.nn.MultiheadAttention`` (``attn``) with positional encodings added to query and
    key, an identity connection and ``dropout_layer`` on the attention output.

    ``dropout`` (deprecated in mmcv, used by DETR configs) sets both ``attn_drop`` and the
    ``dropout_layer``'s ``drop_prob``. Other keyword arguments go to
    ``nn.MultiheadAttention`` (``bias``, ``kdim``, ...), as in mmcv.

    Fix over mmcv 1.x: ``dropout`` sets this layer's ``drop_prob`` only. mmcv wrote it into
    the default ``dropout_layer`` dict itself, so every MultiheadAttention built later in the
    process without a ``dropout_layer`` (a second attention of the same layer, or a Sparse
    R-CNN's DIIHead after a DETR was built) got that output dropout too.
    """

    def __init__(self, embed_dims, num_heads, attn_drop=0., proj_drop=0.,
                 dropout_layer=dict(type='Dropout', drop_prob=0.), init_cfg=None,
                 batch_first=False, **kwargs):
        super().__init__()
        dropout_layer = copy.deepcopy(dropout_layer)
        if 'dropout' in kwargs:
            attn_drop = kwargs.pop('dropout')
            if dropout_layer:
                dropout_layer['drop_prob'] = attn_drop
            else:
                dropout_layer = dict(type='Dropout', drop_prob=attn_drop)
        if embed_dims % num_heads:
            raise ValueError(f'MultiheadAttention: num_heads={num_heads} must divide '
                             f'embed_dims={embed_dims}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.batch_first = batch_first
        self.init_cfg = init_cfg
        self.attn = nn.MultiheadAttention(embed_dims, num_heads, attn_drop, **kwargs)
        self.proj_drop = nn.Dropout(proj_drop)
        self.dropout_layer = build_dropout(dropout_layer) if dropout_layer else nn.Identity()

    def forward(self, query, key=None, value=None, identity=None, query_pos=None, key_pos=None,
                attn_mask=None, key_padding_mask=None, **kwargs):
        """``identity + dropout_layer(proj_drop(attn(query + query_pos, key + key_pos,
        value)))``; key defaults to query, value to key, identity to query, ``key_pos`` to
        ``query_pos`` when their shapes agree (mmcv's rules)."""
        key = query if key is None else key
        value = key if value is None else value
        identity = query if identity is None else identity
        if key_pos is None and query_pos is not None:
            if query_pos.shape == key.shape:
                key_pos = query_pos
            else:
                warnings.warn(f'position encoding of key is missing in '
                              f'{type(self).__name__}.')
        if query_pos is not None:
            query = query + query_pos
        if key_pos is not None:
            key = key + key_pos
        if self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        out = self.attn(query=query, key=key, value=value, attn_mask=attn_mask,
                        key_padding_mask=key_padding_mask)[0]
        if self.batch_first:
            out = out.transpose(0, 1)
        return identity + self.dropout_layer(self.proj_drop(out))


@MODELS.register_module()
class FFN(InitCfgMixin, nn.Module):
    """``num_fcs`` Linears (activation and ``ffn_drop`` dropout after each but the last, and
    ``ffn_drop`` after the last), an optional identity connection through ``dropout_layer``.
    Keys ``layers.0.0`` (first Linear) ... ``layers.{num_fcs - 1}`` (the last), mmcv's.
    ``dropout`` / ``add_residual`` are mmcv's deprecated names of ``ffn_drop`` /
    ``add_identity``."""

    def __init__(self, embed_dims=256, feedforward_channels=1024, num_fcs=2,
                 act_cfg=dict(type='ReLU', inplace=True), ffn_drop=0., dropout_layer=None,
                 add_identity=True, init_cfg=None, **kwargs):
        super().__init__()
        for old, new in (('dropout', 'ffn_drop'), ('add_residual', 'add_identity')):
            if old in kwargs:
                warnings.warn(f'FFN: `{old}` is deprecated, use `{new}`', DeprecationWarning)
                if old == 'dropout':
                    ffn_drop = kwargs.pop(old)
                else:
                    add_identity = kwargs.pop(old)
        if kwargs:
            raise TypeError(f'FFN got unknown arguments {sorted(kwargs)}')
        if not isinstance(num_fcs, int) or num_fcs < 2:
            raise ValueError(f'FFN num_fcs must be an int >= 2, got {num_fcs!r}')
        self.embed_dims = embed_dims
        self.feedforward_channels = feedforward_channels
        self.num_fcs = num_fcs
        self.act_cfg = act_cfg
        self.init_cfg = init_cfg
        self.activate = build_activation_layer(act_cfg)
        layers, in_channels = [], embed_dims
        for _ in range(num_fcs - 1):
            layers.append(nn.Sequential(nn.Linear(in_channels, feedforward_channels),
                                        self.activate, nn.Dropout(ffn_drop)))
            in_channels = feedforward_channels
        layers += [nn.Linear(feedforward_channels, embed_dims), nn.Dropout(ffn_drop)]
        self.layers = nn.Sequential(*layers)
        self.dropout_layer = build_dropout(dropout_layer) if dropout_layer else nn.Identity()
        self.add_identity = add_identity

    def forward(self, x, identity=None):
        out = self.layers(x)
        if not self.add_identity:
            return self.dropout_layer(out)
        return (x if identity is None else identity) + self.dropout_layer(out)


#: mmcv's default FFN but for ``embed_dims=256``: the FFN takes the attentions' width (mmcv
#: refuses any width but 256 unless ``ffn_cfgs`` is given)
_FFN_DEFAULT = dict(type='FFN', feedforward_channels=1024, num_fcs=2, ffn_drop=0.,
                    act_cfg=dict(type='ReLU', inplace=True))
#: mmcv's deprecated layer arguments and the FFN argument each sets
_DEPRECATED_FFN_ARGS = dict(feedforward_channels='feedforward_channels',
                            ffn_dropout='ffn_drop', ffn_num_fcs='num_fcs')


@MODELS.register_module()
class BaseTransformerLayer(InitCfgMixin, nn.Module):
    """One transformer layer: attentions, FFNs and norms run in ``operation_order`` (a
    sequence of 'self_attn', 'cross_attn', 'norm', 'ffn'; pre-norm when it starts with
    'norm'). Keys ``attentions.{i}``, ``ffns.{i}``, ``norms.{i}`` (mmcv's).

    Args:
        attn_cfgs (dict | list[dict]): one config for every attention, or one per attention
            in ``operation_order``.
        ffn_cfgs (dict | list[dict]): likewise for the FFNs; ``embed_dims`` defaults to the
            attentions'.
        **kwargs: mmcv's deprecated ``feedforward_channels``, ``ffn_dropout``,
            ``ffn_num_fcs`` (set in every FFN config; DETR configs use them); anything else
            is refused.
    """

    def __init__(self, attn_cfgs=None, ffn_cfgs=_FFN_DEFAULT, operation_order=None,
                 norm_cfg=dict(type='LN'), init_cfg=None, batch_first=False, **kwargs):
        super().__init__()
        unknown = sorted(set(kwargs) - set(_DEPRECATED_FFN_ARGS))
        if unknown:
            raise TypeError(f'{type(self).__name__} got unknown arguments {unknown}; '
                            f'allowed besides its own: {sorted(_DEPRECATED_FFN_ARGS)}')
        ffn_cfgs = copy.deepcopy(ffn_cfgs)
        for old, new in _DEPRECATED_FFN_ARGS.items():
            if old in kwargs:
                for cfg in ([ffn_cfgs] if isinstance(ffn_cfgs, dict) else ffn_cfgs):
                    cfg[new] = kwargs[old]
        if not isinstance(operation_order, (list, tuple)) or not operation_order or \
                not set(operation_order) <= set(OPERATIONS):
            raise ValueError(f'{type(self).__name__} operation_order must be a sequence of '
                             f'{OPERATIONS}, got {operation_order!r}')
        self.batch_first = batch_first
        self.init_cfg = init_cfg
        num_attn = operation_order.count('self_attn') + operation_order.count('cross_attn')
        if isinstance(attn_cfgs, dict):
            attn_cfgs = [copy.deepcopy(attn_cfgs) for _ in range(num_attn)]
        elif not isinstance(attn_cfgs, (list, tuple)) or len(attn_cfgs) != num_attn:
            raise ValueError(f'{type(self).__name__} attn_cfgs must be a dict or a list of '
                             f'{num_attn} dicts (one per attention in operation_order '
                             f'{tuple(operation_order)}), got {attn_cfgs!r}')
        else:
            attn_cfgs = [dict(c) for c in attn_cfgs]
        self.num_attn = num_attn
        self.operation_order = operation_order
        self.norm_cfg = norm_cfg
        self.pre_norm = operation_order[0] == 'norm'
        self.attentions = nn.ModuleList()
        index = 0
        for name in operation_order:
            if name in ('self_attn', 'cross_attn'):
                cfg = attn_cfgs[index]
                if cfg.setdefault('batch_first', batch_first) != batch_first:
                    raise ValueError(f"{type(self).__name__}: attention {index}'s batch_first="
                                     f"{cfg['batch_first']} differs from the layer's "
                                     f'{batch_first}')
                attention = build_attention(cfg)
                attention.operation_name = name  # some attentions act on it (mmcv)
                self.attentions.append(attention)
                index += 1
        if not self.attentions:
            raise ValueError(f'{type(self).__name__} operation_order {operation_order!r} has '
                             f'no attention')
        self.embed_dims = self.attentions[0].embed_dims
        num_ffns = operation_order.count('ffn')
        if isinstance(ffn_cfgs, dict):
            ffn_cfgs = [copy.deepcopy(ffn_cfgs) for _ in range(num_ffns)]
        if len(ffn_cfgs) != num_ffns:
            raise ValueError(f'{type(self).__name__} ffn_cfgs: {len(ffn_cfgs)} configs for '
                             f'{num_ffns} ffn in operation_order')
        self.ffns = nn.ModuleList()
        for cfg in ffn_cfgs:
            cfg = dict(cfg)
            if cfg.setdefault('embed_dims', self.embed_dims) != self.embed_dims:
                raise ValueError(f"{type(self).__name__}: ffn embed_dims={cfg['embed_dims']} "
                                 f"differs from the attentions' {self.embed_dims}")
            cfg.setdefault('type', 'FFN')
            self.ffns.append(build_feedforward_network(cfg))
        self.norms = nn.ModuleList(build_norm_layer(norm_cfg, self.embed_dims)[1]
                                   for _ in range(operation_order.count('norm')))

    def forward(self, query, key=None, value=None, query_pos=None, key_pos=None,
                attn_masks=None, query_key_padding_mask=None, key_padding_mask=None, **kwargs):
        """mmcv's data flow: self attention on the query (its positional encoding as key's),
        cross attention to ``key`` / ``value``; with pre-norm the identity of each attention
        and FFN is the input before its norm. ``attn_masks``: None, one mask for all, or one
        per attention."""
        norm_i = attn_i = ffn_i = 0
        identity = query
        if attn_masks is None:
            attn_masks = [None] * self.num_attn
        elif isinstance(attn_masks, torch.Tensor):
            warnings.warn(f'Use same attn_mask in all attentions in {type(self).__name__} ')
            attn_masks = [attn_masks] * self.num_attn
        elif len(attn_masks) != self.num_attn:
            raise ValueError(f'{type(self).__name__}: {len(attn_masks)} attn_masks for '
                             f'{self.num_attn} attentions')
        for name in self.operation_order:
            if name == 'norm':
                query = self.norms[norm_i](query)
                norm_i += 1
            elif name == 'ffn':
                query = self.ffns[ffn_i](query, identity if self.pre_norm else None)
                ffn_i += 1
            else:
                self_attn = name == 'self_attn'
                query = self.attentions[attn_i](
                    query, query if self_attn else key, query if self_attn else value,
                    identity if self.pre_norm else None, query_pos=query_pos,
                    key_pos=query_pos if self_attn else key_pos, attn_mask=attn_masks[attn_i],
                    key_padding_mask=query_key_padding_mask if self_attn else key_padding_mask,
                    **kwargs)
                attn_i += 1
                identity = query
        return query


def _layer_call(layer, names, query, *values):
    return layer(query, **dict(zip(names, values)))


@MODELS.register_module()
class TransformerLayerSequence(CheckpointOwnerMixin, InitCfgMixin, nn.Module):
    """``num_layers`` transformer layers run one after the other (``layers``), each a
    checkpoint unit ``layers.{i}`` of one chain.

    Args:
        transformerlayers (dict | list[dict]): one layer config repeated ``num_layers``
            times, or one per layer.
        with_cp (bool | str): checkpoint every layer (``True``: ``'full'``, or a mode);
            ckptzoo's, not mmcv's; plans change it later.
        cp_use_reentrant (bool): torch's reentrant checkpoint (``'full'`` only).
    """

    def __init__(self, transformerlayers=None, num_layers=None, init_cfg=None, with_cp=False,
                 cp_use_reentrant=False):
        super().__init__()
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f'{type(self).__name__} num_layers must be a positive int, '
                             f'got {num_layers!r}')
        if isinstance(transformerlayers, dict):
            transformerlayers = [copy.deepcopy(transformerlayers) for _ in range(num_layers)]
        elif not isinstance(transformerlayers, (list, tuple)) or \
                len(transformerlayers) != num_layers:
            raise ValueError(f'{type(self).__name__} transformerlayers must be a dict or a '
                             f'list of num_layers={num_layers} dicts, got {transformerlayers!r}')
        self.num_layers = num_layers
        self.init_cfg = init_cfg
        self.layers = nn.ModuleList(build_transformer_layer(cfg) for cfg in transformerlayers)
        self.embed_dims = self.layers[0].embed_dims
        self.pre_norm = self.layers[0].pre_norm
        self.layer_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_layers)]

    def _layer_steps(self, names=(), values=(), emit=False, layer_fn=None):
        """The chain: step ``i`` runs ``layer_fn(i, names)(state, *values)`` (default:
        ``layers[i](query, **dict(zip(names, values)))``) through unit ``i``; ``emit``: each
        layer's state also leaves the chain (a decoder's intermediate outputs)."""
        steps = []
        for i, (layer, unit) in enumerate(zip(self.layers, self.layer_units)):
            call = partial(_layer_call, layer, tuple(names)) if layer_fn is None else \
                layer_fn(i, tuple(names))
            steps.append(chain_step(f'layers.{i}', unit, partial(unit, call, module=layer),
                                    layer, emit=emit, args=tuple(values)))
        return steps

    def _checkpoint_steps(self):
        return [self._layer_steps()]

    def _run_layers(self, state, kwargs, emit=False, layer_fn=None):
        """Run the chain from ``state``; ``(last state, [state after each layer or None])``."""
        names = sorted(kwargs)
        return self._run_chain(
            self._layer_steps(names, [kwargs[n] for n in names], emit, layer_fn), state)

    def forward(self, query, key, value, query_pos=None, key_pos=None, attn_masks=None,
                query_key_padding_mask=None, key_padding_mask=None, **kwargs):
        """Every layer on the query in turn (the other arguments go to each layer)."""
        kwargs.update(key=key, value=value, query_pos=query_pos, key_pos=key_pos,
                      attn_masks=attn_masks, query_key_padding_mask=query_key_padding_mask,
                      key_padding_mask=key_padding_mask)
        return self._run_layers(query, kwargs)[0]


# mmcv registers it in ATTENTION (here MODELS); ops import nothing of ckptzoo
MODELS.register_module(module=MultiScaleDeformableAttention)
