"""An apex O1 training script (yolov5 / transformers style): gradient accumulation, clipping over
master_params at the boundary, amp state returned. It cannot run (apex.amp is gone): tests/test_apex.py
rewrites it with ampfix and runs the result under `ampfix run`."""

import torch
from apex import amp
from torch import nn


def train(steps, accumulate):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for step in range(steps):
        x = torch.randn(8, 16).cuda()
        y = torch.randint(0, 4, (8,)).cuda()
        loss = nn.functional.cross_entropy(model(x), y) / accumulate
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        if (step + 1) % accumulate == 0:
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")
    return amp.state_dict()


if __name__ == "__main__":
    print(sorted(train(steps=6, accumulate=2)))
