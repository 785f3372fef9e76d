#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses: cc/fuzz/corpus/<op>/<name>.

Each seed is the byte sequence a harness reads (cc/fuzz/fuzz_util.h describes the encoding, each
harness's header comment its order): valid calls in every mode and dtype, the shapes that take the
kernels' special paths (Winograd, phases, NCHW, EXPLICIT padding, broadcast gradients, soft-NMS),
and a few edge cases (empty tensors). Tensor values are left out: past the end of a seed the
harness draws them from a pseudo-random stream seeded by the bytes. Run from anywhere:

    python3 cc/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL_INTS = [-1, -2, 1 << 30, (1 << 30) + 1, 2**31 - 1, 1 << 31, (1 << 32) + 1, 1 << 40,
                3037000500, 1 << 62, 2**63 - 1, -2**63, -2**31, (1 << 24) + 1, 1 << 20]

# Default flags byte: in_place (bit 0), a re-run split into 4 pieces (bits 1-3: 3), reversed
# (bit 4); extra bits 5-7 per harness.
FLAGS = 0x01 | (3 << 1) | 0x10


def extra(bits, base=FLAGS):
    return base | (bits << 5)


def i(v):
    """Int / Dim."""
    if 0 <= v < 0x80:
        return [v]
    if 0 <= v < 0x10000:
        return [0x80, v & 0xFF, v >> 8]
    if v in SPECIAL_INTS:
        return [0xF0 + SPECIAL_INTS.index(v)]
    return [0xFF] + list(struct.pack('<q', v))


def dflt():
    """IntOr / DimOr / ShapeOr / Shape taking the value the harness suggests."""
    return [0x00]


def int_or(v):
    return [0xC0] + i(v)


def shape(dims):
    """Shape(r) with r = len(dims) as the harness expects."""
    return [0x00] + sum((i(d) for d in dims), [])


def shape_other(dims):
    """Shape(r) with another rank."""
    assert len(dims) < 16
    return [0xC0 | len(dims)] + sum((i(d) for d in dims), [])


def any_shape(dims):
    r = len(dims)
    return ([r] if r < 7 else [0xF0 + r - 7]) + sum((i(d) for d in dims), [])


def shape_or(dims):
    """ShapeOr replaced by AnyShape(dims)."""
    return [0xC0] + any_shape(dims)


def lst(values_bytes, expected=True, n=None):
    """List(len, value): the length byte, then each value's bytes."""
    head = [0x00] if expected else [0xC0 | n]
    return head + sum(values_bytes, [])


def flt(f):
    if f * 16 == int(f * 16) and -64 <= f * 16 < 64:
        return [int(f * 16) + 64]
    return [0xF0] + list(struct.pack('<f', f))


def float_or(index):
    return [index]


SEEDS = {}


def seed(op, name, data):
    SEEDS.setdefault(op, []).append((name, bytes(data)))


# --- leaky_relu: mode, dtype, flags; alpha FloatOr; features AnyShape; grad ShapeOr ----------
for mode in range(3):
    for dtype in range(4):
        seed('leaky_relu', f'm{mode}_t{dtype}',
             [mode, dtype, FLAGS] + float_or(0) + any_shape([2, 3, 5]) + dflt())
seed('leaky_relu', 'alpha_neg_rank0', [0, 2, FLAGS] + float_or(4) + any_shape([]))
seed('leaky_relu', 'big_odd', [2, 2, FLAGS] + float_or(5) + any_shape([1001]) + dflt())
seed('leaky_relu', 'empty', [0, 0, FLAGS] + float_or(0) + any_shape([0, 7]))

# --- swish: mode, dtype, flags; features AnyShape; grad ShapeOr ----------------------------------
for mode in range(2):
    for dtype in range(4):
        seed('swish', f'm{mode}_t{dtype}', [mode, dtype, FLAGS] + any_shape([2, 3, 5]) + dflt())
seed('swish', 'rank0', [0, 2, FLAGS] + any_shape([]))
seed('swish', 'big_odd', [1, 2, FLAGS] + any_shape([1001]) + dflt())
seed('swish', 'empty', [0, 0, FLAGS] + any_shape([0, 7]))
seed('swish', 'grad_mismatch', [1, 3, FLAGS] + any_shape([4, 3]) + shape_or([3, 4]))

# --- clipped_identity: mode, dtype, flags; clip_min, clip_max, leak FloatOr; x AnyShape; grad ---
for mode in range(2):
    for dtype in range(4):
        seed('clipped_identity', f'm{mode}_t{dtype}',
             [mode, dtype, FLAGS] + float_or(0) * 3 + any_shape([2, 3, 5]) + dflt())
seed('clipped_identity', 'empty', [0, 1, FLAGS] + float_or(0) * 3 + any_shape([0, 7]))
seed('clipped_identity', 'min_above_max', [0, 2, FLAGS] + float_or(3) + float_or(4) + float_or(0) + any_shape([3]))
seed('clipped_identity', 'nan_leak',
     [1, 3, FLAGS] + float_or(0) * 2 + [0xF0] + list(struct.pack('<f', float('nan'))) + any_shape([5]) + dflt())
seed('clipped_identity', 'relu6_leak0', [1, 2, FLAGS] + float_or(1) * 3 + any_shape([1001]) + dflt())
seed('clipped_identity', 'signed_zero_bounds', [0, 0, FLAGS] + float_or(4) + float_or(2) + float_or(3) + any_shape([64]))

# --- bias_leaky_relu: features Shape(4), bias ShapeOr([C]) -------------------------------------
for dtype in range(4):
    seed('bias_leaky_relu', f't{dtype}',
         [0, dtype, FLAGS] + float_or(0) + shape([2, 3, 4, 17]) + dflt())
seed('bias_leaky_relu', 'rank1', [0, 2, FLAGS] + float_or(3) + shape_other([33]) + dflt())
seed('bias_leaky_relu', 'empty_rows', [0, 2, FLAGS] + float_or(0) + shape([0, 3, 4, 5]) + dflt())

# --- element_mul: a AnyShape, b Partner, grad ShapeOr --------------------------------------------
for mode in range(2):
    for dtype in range(6):
        # b: a suffix of rank 2 with its first dim 1 (broadcast).
        seed('element_mul', f'm{mode}_t{dtype}',
             [mode, dtype, FLAGS] + any_shape([3, 4, 5]) + [0x40, 2, 0x01] + dflt())
    seed('element_mul', f'm{mode}_same', [mode, 2, FLAGS] + any_shape([7, 9]) + [0x00] + dflt())
    seed('element_mul', f'm{mode}_scalar', [mode, 3, extra(1)] + any_shape([4, 1, 6])
         + [0xC0] + any_shape([]) + dflt())
    seed('element_mul', f'm{mode}_outer', [mode, 2, FLAGS] + any_shape([5, 1])
         + [0xC0] + any_shape([1, 6]) + dflt())
seed('element_mul', 'grad_no_a', [1, 2, extra(2)] + any_shape([3, 4, 5]) + [0x40, 1, 0] + dflt())
seed('element_mul', 'zero_broadcast', [1, 2, FLAGS] + any_shape([0, 3])
     + [0xC0] + any_shape([1, 3]) + dflt())


# --- conv2d_transpose --------------------------------------------------------------------------
def conv_attrs(nchw, padding, sh=1, sw=1, dh=1, dw=1, pads=None):
    """data_format, padding, strides, dilations, explicit_paddings (layout order)."""
    spatial = (2, 3) if nchw else (1, 2)

    def four(hv, wv):
        out = []
        for pos in range(4):
            if pos in spatial:
                v = hv if pos == spatial[0] else wv
                out.append([(v - 1) % 3] + dflt() if 1 <= v <= 3 else [0] + int_or(v))
            else:
                out.append(dflt())
        return lst(out)
    b = [1 if nchw else 0, {'SAME': 0, 'VALID': 1, 'EXPLICIT': 2}[padding]]
    b += four(sh, sw) + four(dh, dw)
    if padding == 'EXPLICIT':
        ph, pw = pads
        vals = []
        for k in range(8):
            dim = k // 2
            if dim in spatial:
                p = ph if dim == spatial[0] else pw
                vals.append(i(p[k % 2]))
            else:
                vals.append(dflt())
        b += lst(vals)
    else:
        b += lst([])
    return b


def conv_seed(name, mode, dtype, attrs, dims, fit=(0, 0), out4=True, flags=FLAGS):
    """dims: n, ih, iw, ci, fh, fw, co (mode 1: n, oh, ow (via fit), ...)."""
    b = [mode, dtype, flags] + attrs + sum((i(d) for d in dims), [])
    if mode in (0, 2):
        b += [0x00] + dflt() + dflt()       # input Image, filter DimOr(ci), ShapeOr
        b += [fit[0], fit[1]]               # FitOut h, w
        if mode == 0:
            b += ([0x00] + dflt() + dflt()) if out4 else [0x80]
        else:
            b += dflt() + dflt() + [0x00]   # grad: DimOr(batch), DimOr(co), Image
    else:
        b += [fit[0], fit[1], 0x00] + dflt() + dflt()  # FitOut h, w, Image; filter
    seed('conv2d_transpose', name, b)


for mode in range(3):
    for dtype in range(4):
        conv_seed(f'm{mode}_t{dtype}_same_s2', mode, dtype, conv_attrs(False, 'SAME', 2, 2),
                  [2, 5, 4, 3, 3, 3, 4], fit=(1, 0))
    conv_seed(f'm{mode}_nchw_valid', mode, 2, conv_attrs(True, 'VALID', 2, 1, 1, 2),
              [1, 4, 6, 3, 3, 2, 5], fit=(1, 0))
    conv_seed(f'm{mode}_explicit', mode, 3,
              conv_attrs(False, 'EXPLICIT', 3, 2, 1, 1, pads=((1, 2), (0, 3))),
              [2, 3, 4, 2, 4, 3, 3], fit=(2, 1))
    # Phase Winograd (4x4 stride 2, 16 channels) and Winograd 3x3 stride 1 (16 channels).
    conv_seed(f'm{mode}_phase_winograd', mode, 2, conv_attrs(False, 'SAME', 2, 2),
              [1, 8, 8, 16, 4, 4, 16])
    conv_seed(f'm{mode}_winograd3x3', mode, 2, conv_attrs(False, 'SAME', 1, 1),
              [1, 16, 16, 16, 3, 3, 16])
    conv_seed(f'm{mode}_empty_batch', mode, 0, conv_attrs(False, 'VALID'), [0, 3, 3, 2, 2, 2, 2])
conv_seed('m0_hw_values', 0, 2, conv_attrs(False, 'SAME', 2, 2), [1, 3, 3, 2, 3, 3, 2],
          out4=False)
conv_seed('m0_int64_dilated', 0, 1, conv_attrs(True, 'VALID', 1, 1, 2, 3),
          [1, 3, 2, 2, 2, 2, 3], flags=extra(1))


# --- fused_conv2d_bias_leaky_relu --------------------------------------------------------------
def fused_seed(name, dtype, padding, s, d, dims, pads=None, flags=FLAGS, alpha=0):
    def four(hv, wv):
        out = []
        for pos in range(4):
            if pos in (1, 2):
                v = hv if pos == 1 else wv
                out.append([(v - 1) % 3] + dflt() if 1 <= v <= 3 else [0] + int_or(v))
            else:
                out.append(dflt())
        return lst(out)
    b = [0, dtype, flags, {'SAME': 0, 'VALID': 1, 'EXPLICIT': 2}[padding]]
    b += four(*s) + four(*d)
    if padding == 'EXPLICIT':
        b += lst([i(pads[k - 2]) if 2 <= k < 6 else dflt() for k in range(8)])
    else:
        b += lst([])
    n, h, w, ci, fh, fw, co = dims
    b += float_or(alpha) + shape([n, h, w, ci]) + i(co) + i(fh) + i(fw) + dflt() + dflt()
    seed('fused_conv2d_bias_leaky_relu', name, b)


for dtype in range(4):
    fused_seed(f't{dtype}_same', dtype, 'SAME', (1, 1), (1, 1), [2, 5, 6, 3, 3, 3, 4])
fused_seed('valid_s2', 2, 'VALID', (2, 2), (1, 1), [1, 9, 8, 4, 3, 2, 5])
fused_seed('explicit_dilated', 3, 'EXPLICIT', (1, 2), (2, 1), [1, 7, 7, 2, 3, 3, 3],
           pads=(1, 0, 2, 1))
fused_seed('winograd', 2, 'SAME', (1, 1), (1, 1), [1, 16, 16, 16, 3, 3, 16])
fused_seed('winograd_cached', 2, 'SAME', (1, 1), (1, 1), [1, 16, 16, 16, 3, 3, 16],
           flags=extra(3, 0))
fused_seed('winograd_cached_batch2', 0, 'SAME', (1, 1), (1, 1), [2, 13, 13, 16, 3, 3, 16],
           flags=extra(3, 0))
fused_seed('one_by_one', 1, 'VALID', (1, 1), (1, 1), [3, 4, 4, 8, 1, 1, 8])
fused_seed('empty_input', 2, 'SAME', (1, 1), (1, 1), [0, 4, 4, 3, 3, 3, 2])

# --- fused_batch_norm_leaky_relu: eps, alpha, x Shape(4), scale, offset (grad: grad, mean, var) --
for mode in range(2):
    for dtype in range(4):
        seed('fused_batch_norm_leaky_relu', f'm{mode}_t{dtype}',
             [mode, dtype, FLAGS] + float_or(0) + float_or(0) + shape([2, 3, 5, 7])
             + dflt() + dflt() + (dflt() * 3 if mode else []))
    seed('fused_batch_norm_leaky_relu', f'm{mode}_rank2_many_rows',
         [mode, 2, FLAGS] + float_or(1) + float_or(2) + shape_other([700, 3])
         + dflt() + dflt() + (dflt() * 3 if mode else []))
    seed('fused_batch_norm_leaky_relu', f'm{mode}_no_rows',
         [mode, 3, FLAGS] + float_or(0) + float_or(1) + shape([0, 2, 2, 4])
         + dflt() + dflt() + (dflt() * 3 if mode else []))

# --- resize_bilinear ---------------------------------------------------------------------------
for dtype in range(10):
    for conv in range(3):  # legacy, align_corners, half_pixel_centers
        seed('resize_bilinear', f'fwd_t{dtype}_c{conv}',
             [0, dtype, extra([0, 1, 2][conv])] + shape([2, 5, 7, 3]) + dflt() + i(9) + i(4))
for dtype in range(4):
    for conv in range(3):
        seed('resize_bilinear', f'grad_t{dtype}_c{conv}',
             [1, dtype, extra([0, 1, 2][conv])] + shape([2, 9, 4, 3]) + i(5) + i(7)
             + dflt() + dflt() + dflt())
seed('resize_bilinear', 'fwd_1x1', [0, 8, FLAGS] + shape([1, 1, 1, 2]) + dflt() + i(3) + i(5))
seed('resize_bilinear', 'grad_to_1x1', [1, 2, extra(1)] + shape([1, 4, 4, 2]) + i(1) + i(1)
     + dflt() + dflt() + dflt())


# --- yolo_decode -------------------------------------------------------------------------------
def yolo_attrs(classes, fmt=None, scale=0, max_log_scale=0):
    # num_classes: 1 + byte % 4 (or IntOr), input_size: 32 * (1 + byte % 16) each; scale_x_y
    # FloatOr (1, 1.05, 2); max_log_scale FloatOr (+inf: the default, log(62.5), 1.5).
    b = ([classes - 1] + dflt()) if 1 <= classes <= 4 else ([0] + int_or(classes))
    b += lst([[12] + dflt(), [12] + dflt()])  # 416 x 416
    if fmt is not None:
        b += [fmt]
    return b + float_or(scale) + float_or(max_log_scale)


for mode in range(2):
    for dtype in range(4):
        for fmt in range(3):
            b = [mode, dtype, extra(2 if fmt == 1 else 0)] + yolo_attrs(3, fmt)
            b += i(2) + i(4) + i(3) + i(3) + dflt() + dflt() + dflt()  # B, H, W, A; features; anchors
            if mode == 1:
                b += [0x00, 0x00, 0x00]
            seed('yolo_decode', f'm{mode}_t{dtype}_f{fmt}', b)
    b = [mode, 2, extra(1)] + yolo_attrs(2, 0, 1) + i(1) + i(3) + i(5) + i(2) + dflt() + dflt()
    b += dflt() + ([0x00, 0x80, 0x00] if mode else [])
    seed('yolo_decode', f'm{mode}_5d_scale', b)
seed('yolo_decode', 'm1_absent_grads', [1, 2, FLAGS] + yolo_attrs(4, 2) + i(1) + i(2) + i(2)
     + i(3) + dflt() + dflt() + dflt() + [0x80, 0x00, 0x80])
seed('yolo_decode', 'm0_80_classes', [0, 0, FLAGS] + yolo_attrs(80, 0) + i(1) + i(2) + i(2)
     + i(3) + dflt() + dflt() + dflt())
# max_log_scale given (torchvision's log(62.5), and 1.5), forward and gradient, and a bad one (NaN
# and -inf: Float's specials).
for mode in range(2):
    for bound in (1, 2):
        b = [mode, 2 if bound == 1 else 3, extra(2 * (bound == 2))] + yolo_attrs(2, bound - 1, 0, bound)
        b += i(1) + i(3) + i(3) + i(2) + dflt() + dflt() + dflt() + ([0x00] * 3 if mode else [])
        seed('yolo_decode', f'm{mode}_max_log_scale{bound}', b)
for name, special in (('nan', 0x84), ('minus_inf', 0x83)):
    seed('yolo_decode', f'm0_max_log_scale_{name}',
         [0, 2, FLAGS] + yolo_attrs(2, 0)[:-1] + [0x60, special] + i(1) + i(2) + i(2) + i(2)
         + dflt() + dflt() + dflt())
# Centres past float's range (scale_x_y 1e30 as raw float bits, input 2^40 x 2^40) with sizes past
# it too (tw = th = 1e20): inf - inf in float, computed in double (what the fuzzer found).
seed('yolo_decode', 'm0_centres_past_float',
     [0, 2, FLAGS] + [0] + dflt() + lst([[0] + int_or(1 << 40), [0] + int_or(1 << 40)]) + [0]
     + [0x60, 0xF0] + list(struct.pack('<f', 1e30)) + float_or(0)
     + i(1) + i(3) + i(2) + i(2) + dflt() + dflt() + [80, 80, 0xA8, 0xA8, 80, 80] * 12)
# One box whose width saturates in every dtype: tx = ty = 0, tw = 1e20 (SpecialValues[8]),
# th = -10, objectness and class 0; the anchors from the stream, made acceptable.
for dtype in range(4):
    seed('yolo_decode', f'm0_t{dtype}_saturated',
         [0, dtype, FLAGS] + yolo_attrs(1, 2) + i(1) + i(1) + i(1) + i(1) + dflt() + dflt()
         + [80, 80, 0xA0 + 8, 0, 80, 80])


# --- yolo_postprocess --------------------------------------------------------------------------
def post_seed(name, dtype, flags, scales, classes, batch, maps, per_class=8, total=16,
              iou=0, score=0, sigma=0, near=1):
    b = [0, dtype, flags, scales - 1] + yolo_attrs(classes) + i(batch)
    for h, w, a in maps:
        b += dflt() + i(h) + i(w) + i(a) + dflt() + dflt() + dflt()
    b += dflt() * 5
    b += [per_class - 1] + dflt() + [total - 1] + dflt()
    b += float_or(iou) + float_or(score) + float_or(sigma) + [near]
    seed('yolo_postprocess', name, b)


for dtype in range(3):
    post_seed(f't{dtype}', dtype, FLAGS, 2, 3, 2, [(4, 4, 3), (2, 2, 3)])
post_seed('three_scales_pad', 2, extra(1), 3, 4, 1, [(4, 4, 3), (2, 2, 3), (1, 1, 2)])
post_seed('soft_nms_noclip', 2, extra(2), 1, 2, 2, [(5, 3, 2)], sigma=2, score=1)
post_seed('all_candidates', 0, FLAGS, 1, 3, 1, [(3, 3, 3)], score=3)
post_seed('five_d', 1, extra(4), 2, 2, 1, [(3, 2, 2), (2, 2, 2)], per_class=3, total=5)


# --- combined_non_max_suppression --------------------------------------------------------------
def nms_seed(name, dtype, flags, b, n, c, q_per_class=False, per_class=8, total=16, iou=0,
             score=0, sigma=0, grid=1):
    d = [0, dtype, flags] + i(b) + i(n) + i(c) + [0x80 if q_per_class else 0x00]
    d += dflt() + dflt() + dflt() + dflt() * 5
    d += [per_class - 1] + dflt() + [total - 1] + dflt()
    d += float_or(iou) + float_or(score) + float_or(sigma) + [grid]
    seed('combined_non_max_suppression', name, d)


for dtype in range(3):
    nms_seed(f't{dtype}', dtype, FLAGS, 2, 20, 3)
nms_seed('per_class_boxes', 2, FLAGS, 2, 15, 4, q_per_class=True)
nms_seed('pad_per_class', 2, extra(1), 1, 30, 3, per_class=4, total=16)
nms_seed('soft_nms', 2, FLAGS, 2, 25, 2, sigma=2, iou=1, score=1)
nms_seed('no_clip_random', 0, extra(2), 1, 40, 5, grid=0)
nms_seed('few_boxes_many_out', 1, FLAGS, 3, 2, 2, per_class=8, total=16)


# --- yolo_targets ------------------------------------------------------------------------------
def targets_seed(name, dtype, flags, per_scale, masks, grids, b, m, k, classes=None):
    d = [0, dtype, flags, len(per_scale) - 1]
    d += lst([[v - 1] + dflt() for v in per_scale])
    d += lst([int_or(v) for v in masks])
    d += lst([[(g - 1) % 13] + (dflt() if g <= 13 else int_or(g)) for g in grids])
    if classes is not None:
        d += i(classes)
    d += i(b) + i(m) + int_or(k) + dflt() + dflt() + dflt() + dflt() + dflt()
    seed('yolo_targets', name, d)


for dtype in range(2):
    targets_seed(f'yolov3_t{dtype}', dtype, extra(1), [3, 3, 3], [6, 7, 8, 3, 4, 5, 0, 1, 2],
                 [4, 4, 8, 8, 16, 16], 2, 5, 9)
targets_seed('tiny_classes', 0, extra(3), [3, 3], [3, 4, 5, 1, 2, 3], [6, 6, 12, 12], 2, 6, 6,
             classes=4)
targets_seed('shared_anchor', 1, extra(1), [2, 2], [0, 1, 1, 2], [4, 4, 8, 8], 1, 7, 3)
targets_seed('raw_values', 0, FLAGS, [1], [0], [3, 3], 1, 3, 1)
targets_seed('no_boxes', 0, extra(1), [1], [0], [2, 2], 2, 0, 1)


# --- inverse MFCC: tensor values written out ---------------------------------------------------
# MelToStft and GriffinLim check their values (finite Mel values, magnitudes and phases) before
# running, and the pseudo-random stream draws a NaN or inf for about one element in three, so
# their seeds carry the values (Value bytes below 0xA0: (b - 80) / 8), else no seed of more than
# a few elements would reach the kernel.
def values(n, lo, hi, k=0):
    """n Value bytes in [lo, hi], a fixed scramble (values (lo - 80) / 8 .. (hi - 80) / 8)."""
    return [lo + (j * 37 + k * 11 + (j * j) % 7) % (hi - lo + 1) for j in range(n)]


def count(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def float_given(f):
    """FloatOr replaced by a Float."""
    return [0x60] + flt(f)


# --- mfcc_to_mel: mode (0 forward, 1 grad), dtype (0 float32, 1 float64), flags; n_mels IntOr(16),
# dct_type IntOr(2), norm Enum(ortho, none), ref FloatOr(1, 2.5, 1e-3), lifter FloatOr(0, 22, 1,
# 7.5); mfcc Shape(2); grad: grad, mel ShapeOr; then mfcc (grad: grad, mel) values ---------------
def mfcc_seed(name, mode, dtype, mfcc, n_mels=None, dct=2, norm=0, ref=0, lifter=0, flags=FLAGS,
              given_values=True):
    d = [mode, dtype, flags] + (dflt() if n_mels is None else int_or(n_mels))
    d += (dflt() if dct == 2 else int_or(dct)) + [norm] + float_or(ref) + float_or(lifter)
    d += shape(mfcc) if len(mfcc) == 2 else shape_other(mfcc)
    if mode == 1:
        d += dflt() + dflt()
    if given_values:
        rows = 16 if n_mels is None else n_mels
        mel = list(mfcc[:-2]) + [rows, mfcc[-1]]
        if mode == 0:
            d += values(count(mfcc), 0x30, 0x70)  # coefficients -6.25 .. 3.75
        else:
            d += values(count(mel), 0x40, 0x60, 1) + values(count(mel), 0x50, 0x90, 2)
    seed('mfcc_to_mel', name, d)


for mode in range(2):
    for dtype in range(2):
        for dct in (2, 3):
            for norm in range(2):  # ortho, none
                mfcc_seed(f'm{mode}_t{dtype}_dct{dct}_{["ortho", "none"][norm]}', mode, dtype,
                          [13, 5], dct=dct, norm=norm)
    mfcc_seed(f'm{mode}_lifter22', mode, 0, [13, 4], lifter=1)
    mfcc_seed(f'm{mode}_lifter7p5_ref2p5_none', mode, 1, [10, 3], dct=3, norm=1, ref=1, lifter=3)
    mfcc_seed(f'm{mode}_n_mfcc_eq_n_mels', mode, 0, [12, 4], n_mels=12, lifter=2)
    mfcc_seed(f'm{mode}_one_frame', mode, 1, [13, 1], dct=3)
    mfcc_seed(f'm{mode}_one_coefficient', mode, 0, [1, 3], n_mels=1)
    mfcc_seed(f'm{mode}_librosa_defaults', mode, 0, [20, 3], n_mels=128)
    mfcc_seed(f'm{mode}_batch', mode, 1, [2, 3, 13, 4], norm=1, lifter=1)
    mfcc_seed(f'm{mode}_empty_batch', mode, 0, [0, 13, 4])
    mfcc_seed(f'm{mode}_random_values', mode, 0, [13, 6], lifter=1, given_values=False)


# --- mel_to_stft: mode (0 librosa's bank, 1 a given bank, 2 librosa's bank given and scaled),
# dtype, flags; sr FloatOr(22050, 8000, 16000), n_fft IntOr(32), power FloatOr(2, 1, 0.5), fmin
# FloatOr(0, 300), fmax FloatOr(-1, 3000), htk Bool, norm Enum(slaney, none); mel Shape(2);
# filters (modes 1, 2) ShapeOr; then mel values, the bank's values (mode 1) or the scale (mode 2) -
def stft_seed(name, mode, dtype, mel, sr=0, n_fft=None, power=0, fmin=0, fmax=0, htk=False,
              norm=0, bank=None, scale=None, flags=FLAGS):
    d = [mode, dtype, flags] + (float_given(sr) if sr > 2 else float_or(sr))
    d += dflt() if n_fft is None else int_or(n_fft)
    d += float_or(power) + float_or(fmin) + float_or(fmax) + [int(htk), norm]
    d += shape(mel) if len(mel) == 2 else shape_other(mel)
    if mode > 0:
        d += dflt()
    d += values(count(mel), 0x50, 0x9F)  # Mel power 0 .. 9.875
    if mode == 1:
        d += bank
    elif mode == 2:
        d += flt(scale)
    seed('mel_to_stft', name, d)


def triangular_bank(n_mels, n_freq):
    """Value bytes of a bank with triangular structure: column k non-zero in rows r, r + 1 only
    (r = k * (n_mels - 1) // n_freq), values 1/8 .. 1."""
    b = [0x50] * (n_mels * n_freq)
    for k in range(n_freq):
        r = k * (n_mels - 1) // n_freq
        b[r * n_freq + k] = 0x51 + (k * 3) % 8
        if k % 3 != 2:  # some columns with one non-zero
            b[(r + 1) * n_freq + k] = 0x51 + (k * 5) % 8
    return b


for dtype in range(2):
    for power in range(2):  # 2, 1
        for htk in (False, True):
            for norm in range(2):  # slaney, none
                stft_seed(f'm0_t{dtype}_p{2 - power}_{"htk" if htk else "slaney"}_'
                          f'{["slaney", "none"][norm]}', 0, dtype, [8, 4], power=power, htk=htk,
                          norm=norm)
    stft_seed(f'm1_t{dtype}_given_bank', 1, dtype, [6, 4], n_fft=16,
              bank=triangular_bank(6, 9))
    stft_seed(f'm2_t{dtype}_librosa_bank_given', 2, dtype, [8, 3], power=1, scale=1.0)
stft_seed('m2_scaled_htk_none', 2, 0, [5, 3], n_fft=20, htk=True, norm=1, scale=2.5)
stft_seed('m1_zero_bank', 1, 1, [4, 2], n_fft=8, bank=[0x50] * 20)
stft_seed('m0_power_half_fmin_fmax', 0, 0, [10, 3], sr=1, power=2, fmin=1, fmax=1)
stft_seed('m0_sr_16000_fmax_3000', 0, 1, [6, 3], sr=2, fmax=1, htk=True)
stft_seed('m0_librosa_defaults', 0, 0, [16, 2], n_fft=256)
stft_seed('m0_tiny_n_fft_4', 0, 0, [2, 3], n_fft=4, sr=1)
stft_seed('m1_tiny_n_fft_4', 1, 1, [2, 3], n_fft=4, bank=[0x58, 0x54, 0x50, 0x50, 0x5C, 0x60])
stft_seed('m0_odd_n_fft', 0, 1, [6, 3], n_fft=15, power=1)
stft_seed('m2_odd_n_fft', 2, 0, [6, 2], n_fft=21, scale=0.5)
stft_seed('m0_one_frame', 0, 0, [8, 1])
stft_seed('m0_one_band', 0, 1, [1, 4], n_fft=16)
stft_seed('m0_batch', 0, 0, [2, 3, 8, 2])
stft_seed('m1_batch', 1, 0, [2, 4, 3], n_fft=8, bank=triangular_bank(4, 5))
stft_seed('m0_empty_batch', 0, 0, [0, 8, 4])
stft_seed('m2_empty_batch', 2, 1, [0, 6, 3], n_fft=16, scale=1.0)


# --- griffin_lim: mode (unused), dtype, flags; n_iter IntOr(2), n_fft IntOr(0), hop_length
# IntOr(0), win_length IntOr(0), window Enum(hann, hamming, blackman, boxcar), center Bool
# (1: off), pad_mode Enum(constant, edge, reflect, symmetric), momentum FloatOr(0.99, 0, 0.5),
# length IntOr(0), init Enum(random, none, phases), seed IntOr(-1) (-1: then a seed byte);
# magnitude Shape(2); phases ShapeOr; then magnitude and phase values -----------------------------
PAD_MODES = ['constant', 'edge', 'reflect', 'symmetric']
WINDOWS = ['hann', 'hamming', 'blackman', 'boxcar']
INITS = ['random', 'none', 'phases']


def gl_seed(name, dtype, mag, n_iter=None, n_fft=None, hop=None, win=None, window='hann',
            center=True, pad_mode='constant', momentum=0, length=None, init='random', seed_=None,
            flags=FLAGS):
    def opt(v):
        return dflt() if v is None else int_or(v)
    d = [0, dtype, flags] + opt(n_iter) + opt(n_fft) + opt(hop) + opt(win)
    d += [WINDOWS.index(window), 0 if center else 1, PAD_MODES.index(pad_mode)]
    d += float_or(momentum) + opt(length) + [INITS.index(init)]
    d += dflt() + [0x2A] if seed_ is None else int_or(seed_)  # -1, then the seed byte 42
    d += shape(mag) if len(mag) == 2 else shape_other(mag)
    d += dflt()  # phases: magnitude's shape with init "phases", else [0]
    d += values(count(mag), 0x50, 0x7F)  # magnitudes 0 .. 5.875
    if init == 'phases':
        d += values(count(mag), 0x00, 0x9F, 3)  # angles -10 .. 9.875 rad
    seed('griffin_lim', name, d)


for dtype in range(2):
    for init in INITS:
        for center in (True, False):
            gl_seed(f't{dtype}_{init}_{"center" if center else "nocenter"}', dtype, [9, 5],
                    init=init, center=center)
for pad_mode in PAD_MODES:
    for center in (True, False):
        gl_seed(f'pad_{pad_mode}_{"center" if center else "nocenter"}', 0, [9, 6],
                pad_mode=pad_mode, center=center, init='none')
for k, window in enumerate(WINDOWS):
    gl_seed(f'window_{window}', k % 2, [9, 4], window=window)
gl_seed('win_12_of_16', 0, [9, 5], win=12)
gl_seed('win_10_hop_3_reflect', 1, [9, 5], win=10, hop=3, pad_mode='reflect', init='phases')
gl_seed('length_given_center', 0, [9, 5], length=18)
gl_seed('length_given_nocenter', 1, [9, 5], length=33, center=False, pad_mode='edge')
gl_seed('length_given_phases', 0, [9, 4], length=13, init='phases', pad_mode='symmetric')
gl_seed('momentum_0', 0, [9, 4], momentum=1, n_iter=3)
gl_seed('momentum_half_8_iters', 1, [9, 4], momentum=2, n_iter=8)
gl_seed('no_iterations', 0, [9, 4], n_iter=0, init='phases')
gl_seed('seed_given', 0, [9, 4], seed_=7)
gl_seed('tiny_n_fft_4', 0, [3, 4], pad_mode='reflect')
gl_seed('tiny_n_fft_4_nocenter', 1, [3, 3], center=False, init='none')
gl_seed('odd_n_fft_15', 0, [8, 5], n_fft=15)
gl_seed('odd_n_fft_9_reflect', 1, [5, 4], n_fft=9, pad_mode='reflect', init='phases')
gl_seed('one_frame_center', 0, [9, 1])
gl_seed('one_frame_nocenter', 1, [9, 1], center=False, pad_mode='symmetric')
gl_seed('hop_larger_than_win', 0, [9, 3], hop=20, center=False)
gl_seed('batch', 0, [2, 9, 3], init='phases')
gl_seed('batch_rank4', 1, [2, 1, 5, 3], pad_mode='edge')
gl_seed('empty_batch', 0, [0, 9, 4])
gl_seed('empty_batch_phases', 1, [0, 9, 4], init='phases')


def main(argv=None):
    """Writes every seed under ROOT (default: cc/fuzz/corpus): each op's folder then holds exactly
    its seeds. Inputs a fuzzing run finds belong in the scratch corpus (`make fuzz` works on a copy
    under build/fuzz/work), and a finding worth keeping becomes a test (tests/test_fuzz_findings.py),
    so nothing here is lost when the folders are rewritten; `tests/test_fuzz.py` checks that the
    committed corpus is what this script writes."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.join(HERE, 'corpus'),
                        help="where the op folders are written (default: cc/fuzz/corpus)")
    root = parser.parse_args(argv).root
    for op, seeds in sorted(SEEDS.items()):
        d = os.path.join(root, op)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        for name, data in seeds:
            with open(os.path.join(d, name), 'wb') as f:
                f.write(data)
        print(f'{op}: {len(seeds)} seeds')


if __name__ == '__main__':
    main()
