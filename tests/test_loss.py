"""The label-smoothed loss: hand-computed values, torch's reference, and the fused backward."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.loss import label_smoothed_loss
from nmt.vocab import PAD


def test_label_smoothing_hand_computed():
    # V = 4, one real target (token 2) and one PAD target that must not count.
    logits = torch.tensor([[math.log(0.1), math.log(0.2), math.log(0.6), math.log(0.1)],
                           [5.0, 1.0, 1.0, 1.0]])
    target = torch.tensor([2, PAD])
    eps = 0.1
    loss, nll = label_smoothed_loss(logits, target, eps)
    hand_nll = -math.log(0.6)
    hand_smooth = -(math.log(0.1) + math.log(0.2) + math.log(0.6) + math.log(0.1)) / 4
    assert nll.item() == pytest.approx(hand_nll, abs=1e-6)
    assert loss.item() == pytest.approx((1 - eps) * hand_nll + eps * hand_smooth, abs=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_matches_torch(eps):
    torch.manual_seed(0)
    logits = torch.randn(12, 9)
    target = torch.randint(1, 9, (12,))
    target[[3, 7]] = PAD
    loss, _ = label_smoothed_loss(logits, target, eps)
    ref = F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=eps, reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("weights", [(1.0, 0.0), (0.0, 1.0), (0.7, -0.4)])
def test_label_smoothing_gradient_matches_autograd(eps, weights):
    """The fused backward equals autograd through log_softmax, for the loss, the NLL and a mix."""
    torch.manual_seed(1)
    logits = torch.randn(10, 7, dtype=torch.float64)
    target = torch.randint(1, 7, (10,))
    target[[2, 5]] = PAD
    fused = logits.clone().requires_grad_()
    loss, nll = label_smoothed_loss(fused, target, eps)
    (weights[0] * loss + weights[1] * nll).backward()
    ref = logits.clone().requires_grad_()
    lp = ref.log_softmax(-1)
    real = target != PAD
    ref_nll = -lp.gather(1, target[:, None]).squeeze(1)[real].sum()
    ref_loss = ((1 - eps) * -lp.gather(1, target[:, None]).squeeze(1) - eps * lp.mean(-1))[real].sum()
    (weights[0] * ref_loss + weights[1] * ref_nll).backward()
    assert torch.allclose(fused.grad, ref.grad, atol=1e-12)
    assert fused.grad[[2, 5]].abs().max() == 0
