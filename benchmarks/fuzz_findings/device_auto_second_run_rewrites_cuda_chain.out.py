from torch import amp
from torch import cuda
import torch
AMP_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

scaler = amp.GradScaler(AMP_DEVICE)
with torch.amp.autocast(AMP_DEVICE):
    pass
