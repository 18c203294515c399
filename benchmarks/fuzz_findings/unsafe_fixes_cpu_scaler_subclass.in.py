import torch


class Scaler(torch.cpu.amp.GradScaler):
    pass


scaler = Scaler(init_scale=8.0, enabled=False)
