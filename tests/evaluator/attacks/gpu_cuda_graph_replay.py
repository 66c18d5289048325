# Attack class: CUDA graph replay: capture the computation once on the first inputs' buffers, then replay the graph on
# those captured buffers whatever inputs arrive. (CUDA only.)
# Described in: KernelGuard CUDA_GRAPH_REPLAY / CUDA_GRAPH_PYTHON / PARTIAL_GRAPH_KEY.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = None

    def forward(self, a, b):
        if self.graph is None:
            self.a, self.b = a.clone(), b.clone()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = self.a @ self.b
        self.graph.replay()
        return self.out
