"""The activations, losses and element-wise math that models train with, as one small module per theme so a whole
theme compiles as one graph (forward and backward) and a wrong family is named by its output key."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Activations(nn.Module):
    # Every activation nn offers that inductor lowers or decomposes, on one input that crosses each one's kinks
    # (values in about [-3, 3]); PReLU brings a learned slope, GLU halves the last dimension.
    def __init__(self) -> None:
        super().__init__()
        self.prelu = nn.PReLU(4)
        self.rrelu = nn.RReLU()  # eval mode: a fixed slope, no randomness
        self.rrelu.eval()

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "elu": F.elu(x), "selu": F.selu(x), "celu": F.celu(x, 0.7), "leaky_relu": F.leaky_relu(x, 0.2),
            "hardswish": F.hardswish(x), "hardsigmoid": F.hardsigmoid(x), "mish": F.mish(x),
            "softplus": F.softplus(x, beta=2.0, threshold=4.0), "softshrink": F.softshrink(x, 0.5),
            "hardshrink": F.hardshrink(x, 0.5), "logsigmoid": F.logsigmoid(x), "tanhshrink": F.tanhshrink(x),
            "prelu": self.prelu(x), "glu": F.glu(x, dim=-1), "silu": F.silu(x), "relu6": F.relu6(x),
            "threshold": F.threshold(x, 0.3, -1.0), "softmin": F.softmin(x, dim=-1), "rrelu": self.rrelu(x),
            "gelu": F.gelu(x), "softsign": F.softsign(x), "sigmoid": torch.sigmoid(x),
        }


class Losses(nn.Module):
    # The losses of nn.functional with their reductions, from one set of logits: regression, classification
    # (with class weights, ignore_index and label smoothing), ranking and embedding losses, 2-D NLL.
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor, target: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.linear(x)
        probs = torch.sigmoid(logits)
        log_probs = F.log_softmax(logits, dim=-1)
        weight = torch.linspace(0.5, 1.5, 5, device=x.device, dtype=x.dtype)
        sign = torch.where(target > 0.5, 1.0, -1.0).to(x.dtype)
        image = logits.reshape(1, 5, 2, -1) if logits.shape[0] % 2 == 0 else logits.reshape(1, 5, 1, -1)
        return {
            "mse": F.mse_loss(logits, target), "l1": F.l1_loss(logits, target, reduction="sum"),
            "smooth_l1": F.smooth_l1_loss(logits, target, beta=0.5), "huber": F.huber_loss(logits, target, delta=0.7),
            "bce": F.binary_cross_entropy(probs, target), "bce_logits": F.binary_cross_entropy_with_logits(
                logits, target, pos_weight=weight),
            "nll": F.nll_loss(log_probs, labels, weight=weight, ignore_index=2),
            "cross_entropy": F.cross_entropy(logits, labels, label_smoothing=0.1),
            "nll2d": F.nll_loss(F.log_softmax(image, dim=1), labels.reshape(1, image.shape[2], -1) % 5),
            "kl_div": F.kl_div(log_probs, target.softmax(-1), reduction="batchmean"),
            "soft_margin": F.soft_margin_loss(logits, sign), "multi_margin": F.multi_margin_loss(logits, labels),
            "multilabel_soft_margin": F.multilabel_soft_margin_loss(logits, (target > 0.5).float()),
            "hinge": F.hinge_embedding_loss(logits, sign), "poisson": F.poisson_nll_loss(logits, target),
            "gaussian": F.gaussian_nll_loss(logits, target, probs + 0.1),
            "margin_ranking": F.margin_ranking_loss(logits[:, 0], logits[:, 1], sign[:, 0]),
            "cosine_embedding": F.cosine_embedding_loss(logits[:-1], logits[1:], sign[:-1, 0]),
            "triplet": F.triplet_margin_loss(logits[:1], logits[1:2], logits[2:3]),
        }


class ElementwiseMath(nn.Module):
    # Element-wise math of normalisation layers, positional encodings and samplers: inverse trigonometry, error
    # and gamma functions, exp/log variants, rounding, binary ops with two tensors. Inputs kept in every
    # function's domain (x in (-1, 1), y > 0).
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(1.25))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        x = x * self.gain.clamp(max=0.79)
        return {
            "asin": torch.asin(x), "acos": torch.acos(x), "atan": torch.atan(x), "atan2": torch.atan2(x, y),
            "asinh": torch.asinh(y), "acosh": torch.acosh(y + 1), "atanh": torch.atanh(x), "sinh": torch.sinh(x),
            "cosh": torch.cosh(x), "tan": torch.tan(x), "erfc": torch.erfc(x), "erfinv": torch.erfinv(x),
            "lgamma": torch.lgamma(y), "digamma": torch.digamma(y), "polygamma": torch.polygamma(1, y),
            "expm1": torch.expm1(x), "log1p": torch.log1p(y), "log2": torch.log2(y), "log10": torch.log10(y),
            "exp2": torch.exp2(x), "logit": torch.logit(y.clamp(max=0.9), eps=1e-3), "xlogy": torch.xlogy(x, y),
            "hypot": torch.hypot(x, y), "lerp": torch.lerp(x, y, 0.3), "logaddexp": torch.logaddexp(x, y),
            "logaddexp2": torch.logaddexp2(x, y), "copysign": torch.copysign(y, x), "fmax": torch.fmax(x, y),
            "fmin": torch.fmin(x, y), "sinc": torch.sinc(x), "i0": torch.i0(x), "sgn": torch.sgn(x),
            "frac": torch.frac(3 * x), "trunc": torch.trunc(3 * x), "round": torch.round(3 * x, decimals=1),
            "ceil": torch.ceil(3 * x), "addcdiv": torch.addcdiv(x, x, y, value=0.5),
            "addcmul": torch.addcmul(x, x, y, value=0.5), "nan_to_num": torch.nan_to_num(x.log()),
            "reciprocal": torch.reciprocal(y), "rsqrt": torch.rsqrt(y), "pow": torch.pow(y, x),
            "deg2rad": torch.deg2rad(x), "rad2deg": torch.rad2deg(x), "heaviside": torch.heaviside(x.detach(), y),
            "special_entr": torch.special.entr(y), "special_erfcx": torch.special.erfcx(x),
            "special_i0e": torch.special.i0e(x), "special_i1": torch.special.i1(x),
            "special_i1e": torch.special.i1e(x), "special_ndtri": torch.special.ndtri(y.clamp(max=0.9)),
            "special_log_ndtr": torch.special.log_ndtr(x), "special_xlog1py": torch.special.xlog1py(x, y),
            "bessel_j0": torch.special.bessel_j0(x), "bessel_j1": torch.special.bessel_j1(x),
            "signbit": torch.signbit(x), "isinf": torch.isinf(x.log()), "isnan": torch.isnan(x.log()),
            "isneginf": torch.isneginf(x.log()), "logical_xor": torch.logical_xor(x > 0, y > 0.5),
            "nextafter": torch.nextafter(x.detach(), y.detach()), "clamp": torch.clamp(x, -0.5, 0.5),
            "where": torch.where(x > 0, x, y), "amax": x.amax(-1), "amin": x.amin(0), "prod": y.prod(-1),
            "logsumexp": x.logsumexp(-1), "std": x.std(0), "var": x.var(-1, correction=0), "norm": x.norm(dim=-1),
            # aminmax has no derivative before torch 2.13 (seen on 2.11, CUDA): its forward lowering is what counts.
            "aminmax": torch.stack(torch.aminmax(x.detach(), dim=0)), "median": x.median(0).values,
            "nansum": torch.nansum(x), "count_nonzero": torch.count_nonzero(x > 0.2, dim=0),
            "any": (x > 0.7).any(-1), "all": (y > 0.01).all(0), "argmax": x.argmax(-1), "argmin": y.argmin(0),
            "kthvalue": x.kthvalue(2, dim=0).values, "flip": x.flip(0), "roll": x.roll(1, 0),
            "rot90": torch.rot90(x, 1, (0, 1)), "tril": x.tril(), "triu": x.triu(1), "repeat": x.repeat(2, 1),
            "repeat_interleave": x.repeat_interleave(2, dim=0), "diag_embed": torch.diag_embed(x[:, :3]),
            "diagonal": x.diagonal().clone(), "trace": torch.trace(x), "unfold": x.unfold(0, 2, 1),
            "take": torch.take(x, torch.tensor([0, 5, 5, 11], device=x.device)),
        }
