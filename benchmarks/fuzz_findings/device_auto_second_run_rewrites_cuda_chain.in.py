from torch.cuda import amp
from torch import cuda

scaler = amp.GradScaler()
with cuda.amp.autocast():
    pass
