"""`bench.readbacks.ReadBacks` on the CPU: it counts the ops that make a host wait for a GPU
(on tensors marked as on the device, or computed from them) and nothing else."""

from __future__ import annotations

import torch

from bench.readbacks import ReadBacks


def test_it_counts_the_ops_that_wait_for_the_device_and_only_those():
    counter = ReadBacks("cpu")
    dev = torch.arange(10)
    host = torch.arange(10)
    counter.on_device(dev)
    with counter:
        x = dev * 2  # computed from a device tensor: on the device
        mask = x > 5
        # no wait: sizes known on the host
        (
            torch.sort(x),
            torch.cumsum(x, 0),
            x.index_select(0, host),
            torch.nonzero_static(mask, size=3),
        )
        torch.zeros(10, dtype=torch.long).scatter_reduce_(0, host, x, "amin", include_self=False)
        torch.repeat_interleave(host, x, output_size=90)
        int(host.sum()), host[host > 3], host.tolist(), torch.unique(host)  # host tensors
        y = host.to("cpu", non_blocking=True)  # the CPU stand-in's move to the device
        x.to(torch.float32), host.to(torch.float32)  # a dtype alone moves nothing
        assert not counter.held(host) and counter.held(y)  # the host's tensor stays there
        assert counter.total == 0, counter.counts
        # each of these waits once
        int(x.sum()), bool(mask.any()), x.sum().item()
        torch.nonzero(mask), torch.argwhere(mask), torch.unique(x), x[mask], x.masked_select(mask)
        x[mask] = 0
        torch.repeat_interleave(host, x)
        torch.bincount(x), x.tolist(), x.cpu(), y.tolist()
        host.clone().to("cpu")  # a blocking copy to the device drains the stream
        ptr = torch.zeros(11, dtype=torch.long)  # a factory's output, filled from the device
        torch.cumsum(x, 0, out=ptr[1:])
        int(ptr[3])
    assert counter.counts == {
        "_local_scalar_dense": 4, "nonzero": 2, "to(device)": 1, "_unique2": 1, "index": 1, "masked_select": 1,
        "index_put_": 1, "repeat_interleave": 1, "bincount": 1, "tolist()": 2, "cpu()": 1,
    }  # fmt: skip
    with counter.stage() as found, counter:
        int(dev.max())
    assert found == {"_local_scalar_dense": 1} and counter.total == 17
