"""The label-smoothed loss: hand-computed values, torch's reference, and the fused backward."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.core.vocab import PAD
from nmt.model.loss import Workspace, label_smoothed_loss, projected_loss


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


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("with_bias", [False, True])
def test_projected_loss_equals_projection_then_loss(eps, with_bias):
    """Fused projection + loss: the same loss, NLL and gradients (hidden and weight) as F.linear followed
    by label_smoothed_loss (which computes in float32, hence the tolerance); with a fixed output bias (an
    imported model's, never trained) too."""
    torch.manual_seed(2)
    hidden, weight = torch.randn(11, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    bias = torch.randn(8, dtype=torch.float64) * 3 if with_bias else None
    target = torch.randint(1, 8, (11,))
    target[[0, 6]] = PAD
    ref_h, ref_w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref_loss, ref_nll = label_smoothed_loss(F.linear(ref_h, ref_w, bias), target, eps)
    (ref_loss + 0.5 * ref_nll).backward()
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, nll = _fused(h, w, target, eps, Workspace(), bias)
    (loss + 0.5 * nll).backward()
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    assert torch.allclose(h.grad, ref_h.grad, atol=1e-5) and torch.allclose(w.grad, ref_w.grad, atol=1e-5)
    if with_bias:  # and without a backward (validation), the same numbers
        with torch.no_grad():
            plain = projected_loss(hidden.float(), weight.float(), target, eps, Workspace(), bias.float())
        assert plain[0].item() == pytest.approx(ref_loss.item(), rel=1e-5)


def _fused(h, w, target, eps, workspace, bias=None):
    """projected_loss in float64 (the public function insists on float32, the training precision)."""
    from nmt.model.loss import _ProjectedLoss

    return _ProjectedLoss.apply(h, w, target, eps, workspace, bias)


def test_projected_loss_reuses_its_workspace_and_never_shares_it():
    torch.manual_seed(3)
    workspace = Workspace()
    w = torch.randn(6, 4, requires_grad=True)
    target = torch.tensor([1, 2, 3])
    loss, _ = projected_loss(torch.randn(3, 4, requires_grad=True), w, target, 0.1, workspace)
    first = workspace.buffer.data_ptr()
    assert workspace.busy  # held until the backward
    # A second graph before the first backward must not overwrite the first one's log-probabilities.
    h2 = torch.randn(3, 4, requires_grad=True)
    loss2, _ = projected_loss(h2, w, target, 0.1, workspace)
    ref2, _ = label_smoothed_loss(F.linear(h2, w), target, 0.1)
    loss2.backward()
    loss.backward()
    assert not workspace.busy
    assert loss2.item() == pytest.approx(ref2.item(), rel=1e-6)
    projected_loss(torch.randn(2, 4, requires_grad=True), w, target[:2], 0.1, workspace)[0].backward()
    assert workspace.buffer.data_ptr() == first  # a smaller batch: the same memory


def test_projected_loss_refuses_half_precision():
    with pytest.raises(ValueError, match="float32"):
        projected_loss(torch.randn(2, 4, dtype=torch.bfloat16), torch.randn(6, 4), torch.tensor([1, 2]), 0.1, Workspace())
