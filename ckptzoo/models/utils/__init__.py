from .norm import NORM_LAYERS, build_norm_layer

__all__ = ['NORM_LAYERS', 'build_norm_layer']
from .weight_init import (apply_init_cfg, bias_init_with_prob, constant_init,  # noqa: F401
                          kaiming_init, normal_init, uniform_init, xavier_init)
from .conv_module import ConvModule, build_activation_layer  # noqa: F401
from .builder import (CONV_LAYERS, LINEAR_LAYERS, build_conv_layer,  # noqa: F401
                      build_linear_layer)
from .conv_ws import ConvWS2d, conv_ws_2d  # noqa: F401
from .context_block import ContextBlock  # noqa: F401
from .normed_predictor import NormedConv2d, NormedLinear  # noqa: F401
from .non_local import NonLocal2d  # noqa: F401
from .generalized_attention import GeneralizedAttention  # noqa: F401
from .plugin import PLUGIN_LAYERS, build_plugin_layer  # noqa: F401
from .sequential import Sequential, build_model_or_sequence  # noqa: F401
from .res_layer import ResLayer, SimplifiedBasicBlock  # noqa: F401
from .make_divisible import make_divisible  # noqa: F401
from .drop import DropPath, drop_path  # noqa: F401
from .conv2d_adaptive_padding import Conv2dAdaptivePadding  # noqa: F401
from .depthwise_separable_conv_module import DepthwiseSeparableConvModule  # noqa: F401
from .se_layer import SELayer  # noqa: F401
from .inverted_residual import InvertedResidual  # noqa: F401
from .csp_layer import CSPLayer, DarknetBottleneck  # noqa: F401
from .transformer import PatchEmbed  # noqa: F401
from .merge_cells import BaseMergeCell, ConcatCell, GlobalPoolingCell, SumCell  # noqa: F401
from .conv_aws import ConvAWS2d  # noqa: F401
from .saconv import SAConv2d  # noqa: F401
from .scale import Scale  # noqa: F401
from .sigmoid_geometric_mean import SigmoidGeometricMean, sigmoid_geometric_mean  # noqa: F401

from .gaussian_target import (gaussian2D, gaussian_radius, gen_gaussian_target,  # noqa: F401
                              get_local_maximum, get_topk_from_heatmap,
                              transpose_and_gather_feat)

from .hsigmoid import HSigmoid  # noqa: F401
from .se_layer import DyReLU  # noqa: F401
from .misc import interpolate_as  # noqa: F401
from .conv_upsample import ConvUpsample  # noqa: F401

from .transformer_layers import (FFN, BaseTransformerLayer, MultiheadAttention,  # noqa: F401
                                 MultiScaleDeformableAttention, TransformerLayerSequence,
                                 build_attention, build_dropout, build_feedforward_network,
                                 build_transformer_layer, build_transformer_layer_sequence)
from .positional_encoding import LearnedPositionalEncoding, SinePositionalEncoding  # noqa: F401
from .transformer import (DeformableDetrTransformer,  # noqa: F401
                          DeformableDetrTransformerDecoder, DetrTransformerDecoder,
                          DetrTransformerDecoderLayer, DetrTransformerEncoder, DynamicConv,
                          Transformer, inverse_sigmoid)
from .panoptic_gt_processing import preprocess_panoptic_gt  # noqa: F401,E402
