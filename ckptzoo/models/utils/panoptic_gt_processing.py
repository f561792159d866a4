"""mmdet 2.x ``preprocess_panoptic_gt`` (MaskFormer / Mask2Former): one image's instance masks
and semantic map as one list of ``(label, mask)`` targets: the things, then one mask per stuff
class present in the semantic map (labels in ``[num_things, num_things + num_stuff)``; 255 and
thing labels of the map are skipped)."""
import torch

__all__ = ['preprocess_panoptic_gt']


def preprocess_panoptic_gt(gt_labels, gt_masks, gt_semantic_seg, num_things, num_stuff,
                           img_metas):
    """``(labels (n,), masks (n, H, W) long)``, masks padded to ``img_metas['pad_shape']``.

    ``gt_masks``: BitmapMasks of the things; ``gt_semantic_seg``: ``(1, H, W)`` or None (instance
    segmentation: the things only)."""
    num_classes = num_things + num_stuff
    things_masks = gt_masks.pad(img_metas['pad_shape'][:2], pad_val=0).to_tensor(
        dtype=torch.bool, device=gt_labels.device)
    if gt_semantic_seg is None:
        return gt_labels, things_masks.long()
    seg = gt_semantic_seg.squeeze(0)
    stuff_masks, stuff_labels = [], []
    for label in torch.unique(seg, sorted=False, return_inverse=False, return_counts=False):
        if label < num_things or label >= num_classes:
            continue
        stuff_masks.append(seg == label)
        stuff_labels.append(label)
    if stuff_masks:
        labels = torch.cat([gt_labels, torch.stack(stuff_labels, dim=0)], dim=0)
        masks = torch.cat([things_masks, torch.stack(stuff_masks, dim=0)], dim=0)
    else:
        labels, masks = gt_labels, things_masks
    return labels, masks.long()
