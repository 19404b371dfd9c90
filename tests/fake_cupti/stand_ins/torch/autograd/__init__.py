"""Stand-in for `torch.autograd`: `backward(tensors)`, which
`Tensor.backward()` looks up here at each call, as PyTorch's does; here
`tensors` is the backward's work itself, a function it calls."""


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    tensors()
