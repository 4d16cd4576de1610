import torch

# The tiny models here are dominated by thread overhead: on a shared CPU more threads only slow
# every test down (10x and more when other processes hold the cores).
torch.set_num_threads(1)
