"""Cases that hold only where the cell imports the host's torch, not a copy of its own."""

import os
import sys

import torch


def test_torch_is_the_hosts() -> None:
    assert not torch.__file__.startswith(sys.prefix), "torch was installed into the cell"
    assert torch.__file__.startswith(os.environ["FTMATRIX_TEST_HOST_SITE"])


def test_cpu_training_step() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 1)
    before = layer.weight.detach().clone()
    loss = layer(torch.ones(2, 4)).pow(2).mean()
    loss.backward()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    assert torch.isfinite(loss)
    assert not torch.equal(before, layer.weight)


def test_six_is_the_cells() -> None:
    import six

    assert six.__file__.startswith(sys.prefix)
