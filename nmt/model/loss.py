"""The training loss: label-smoothed cross-entropy with a fused backward, and the same loss fused with
the output projection so that the (N, V) logits live in one reusable workspace."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from nmt.core.vocab import PAD


def _smoothed_sums(log_probs: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    """Summed label-smoothed loss and NLL over non-PAD targets of log_probs (N, V), and the (N,) mask of them."""
    real = target != PAD  # (N,)
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (N,)
    smooth = -log_probs.mean(-1)  # (N,)
    loss = torch.where(real, (1.0 - epsilon) * nll + epsilon * smooth, 0.0).sum()
    return loss, torch.where(real, nll, 0.0).sum(), real


def _logit_gradient(log_probs: Tensor, target: Tensor, real: Tensor, epsilon: float, g_loss: Tensor,
                    g_nll: Tensor) -> Tensor:
    """d (g_loss * loss + g_nll * nll) / d logits (N, V), computed in place over log_probs."""
    vocab = log_probs.shape[-1]
    # In place: a fresh (N, V) tensor costs page faults that take longer than the exp itself.
    grad = log_probs.exp_().mul_(g_loss + g_nll)  # (N, V): p * (g_loss + g_nll)
    if epsilon:
        grad.sub_(g_loss * (epsilon / vocab))
    gold = (g_loss * (1.0 - epsilon) + g_nll).expand(len(target), 1)
    grad.scatter_add_(1, target[:, None], -gold)
    return grad.mul_(real[:, None])


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Fused forward/backward of the summed label-smoothed loss and NLL.

    Autograd through log_softmax + gather + mean materialises several (N, V) temporaries, zeroed
    and scattered into; on CPU that cost ~15% of a small model's update. The gradient has a
    closed form: d loss / d logits = g_loss * (p - (1 - eps) * onehot - eps / V) + g_nll * (p - onehot).
    """

    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        log_probs = logits.log_softmax(-1)  # (N, V)
        loss, nll, real = _smoothed_sums(log_probs, target, epsilon)
        ctx.save_for_backward(log_probs, target, real)
        ctx.epsilon = epsilon
        return loss, nll

    @staticmethod
    def backward(ctx: Any, g_loss: Tensor, g_nll: Tensor) -> tuple[Optional[Tensor], ...]:
        log_probs, target, real = ctx.saved_tensors
        # Training runs backward once, so overwriting the saved log-probabilities is safe.
        return _logit_gradient(log_probs, target, real, ctx.epsilon, g_loss, g_nll), None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-PAD targets.

    logits (N, V), target (N,). The smoothed target puts 1 - eps on the gold token and eps spread
    uniformly over all V tokens, as torch's `cross_entropy(label_smoothing=eps)` does.
    """
    # torch leaves Function.apply unannotated: it returns what forward returns.
    apply: Callable[..., tuple[Tensor, Tensor]] = _LabelSmoothedCrossEntropy.apply
    return apply(logits.float(), target, float(epsilon))


class Workspace:
    """One reusable (N, V) buffer for `projected_loss`: the logits of one batch, then its log-probabilities,
    then its gradient. Reusing it saves allocating (and page-faulting in) two fresh (N, V) tensors per
    batch, 86 MB each for the multi30k preset. Held from a forward to its backward; a second forward
    in between (two graphs alive at once) gets a fresh tensor instead, so it is never shared."""

    def __init__(self) -> None:
        self.buffer: Optional[Tensor] = None
        self.busy = False

    def take(self, rows: int, cols: int, like: Tensor) -> tuple[Tensor, bool]:
        """A (rows, cols) tensor of `like`'s dtype and device, and whether it is the shared buffer."""
        if self.busy:
            return like.new_empty(rows, cols), False
        need = rows * cols
        if self.buffer is None or self.buffer.numel() < need or self.buffer.dtype != like.dtype \
                or self.buffer.device != like.device:
            self.buffer = like.new_empty(need)
        return self.buffer[:need].view(rows, cols), True


class _ProjectedLoss(torch.autograd.Function):
    """Output projection and label-smoothed loss in one: logits = hidden @ weight^T (+ a fixed bias), then the loss of
    `_LabelSmoothedCrossEntropy`, with the logits, log-probabilities and their gradient all in one
    (N, V) tensor of the workspace."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, target: Tensor, epsilon: float,
                workspace: Workspace, bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        logits, shared = workspace.take(hidden.size(0), weight.size(0), hidden)
        if bias is None:
            torch.mm(hidden, weight.t(), out=logits)  # (N, V)
        else:
            torch.addmm(bias, hidden, weight.t(), out=logits)
        log_probs = torch.log_softmax(logits, -1, out=logits)
        loss, nll, real = _smoothed_sums(log_probs, target, epsilon)
        ctx.save_for_backward(hidden, weight, target, real)
        ctx.log_probs, ctx.epsilon, ctx.workspace, ctx.shared = log_probs, epsilon, workspace, shared
        workspace.busy = workspace.busy or shared
        return loss, nll

    @staticmethod
    def backward(ctx: Any, g_loss: Tensor, g_nll: Tensor) -> tuple[Optional[Tensor], ...]:
        hidden, weight, target, real = ctx.saved_tensors
        grad = _logit_gradient(ctx.log_probs, target, real, ctx.epsilon, g_loss, g_nll)  # (N, V)
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None  # (N, D)
        grad_weight = grad.t() @ hidden if ctx.needs_input_grad[1] else None  # (V, D)
        if ctx.shared:
            ctx.workspace.busy = False
        ctx.log_probs = None
        return grad_hidden, grad_weight, None, None, None, None


def projected_loss(hidden: Tensor, weight: Tensor, target: Tensor, epsilon: float,
                   workspace: Workspace, bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """`label_smoothed_loss(hidden @ weight^T + bias, target, epsilon)` for fp32 hidden states (N, D) and output
    weights (V, D) (and a fixed, untrained bias (V,)), with the (N, V) intermediate in `workspace`. For
    training: the backward overwrites it."""
    if hidden.dtype != torch.float32 or weight.dtype != torch.float32:
        raise ValueError("projected_loss computes in float32; project and call label_smoothed_loss under autocast")
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        logits = hidden @ weight.t() if bias is None else torch.addmm(bias, hidden, weight.t())
        return label_smoothed_loss(logits, target, epsilon)  # no backward to come
    apply: Callable[..., tuple[Tensor, Tensor]] = _ProjectedLoss.apply  # unannotated in torch, as above
    return apply(hidden, weight, target, float(epsilon), workspace, bias)
