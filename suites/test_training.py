"""A training step of a small MLP: forward, cross-entropy, backward (the optimizer
update is left out: it is a separate, foreach-heavy graph).

loss.backward() is a graph break (Dynamo does not trace it); the forward graph
and AOTAutograd's backward graph both compile with our backend: 7 kernels, 5
matmul externs, no fallback (nll_loss's backward scatter into the one-hot
gradient is a compare with the column index, fused into log_softmax's backward).
"""
import pytest
import torch.nn.functional as F

from suites import models as M
from suites.sizes import F32, budget, pick

BATCH, DIM, HIDDEN, CLASSES = pick(cpu=(64, 128, 256, 10), cuda=(4096, 1024, 4096, 1000))
I64 = 8


def training_traffic():
    bd, bh, bk = BATCH * DIM, BATCH * HIDDEN, BATCH * CLASSES
    w1, w2 = HIDDEN * DIM, CLASSES * HIDDEN
    # forward: fc1 reads x, W1 -> h; relu h -> a; fc2 reads a, W2 -> z;
    #          log_softmax z -> logp; nll reads logp, targets -> loss
    # backward: logp, targets -> dz; dW2 = dz^T a; db2 = sum dz; da = dz W2;
    #           relu' reads da, a -> dh; dW1 = dh^T x; db1 = sum dh, which
    #           recomputes relu' from da and a (one [batch, hidden] read more
    #           than reading dh back; the target is 7 * bh)
    read = 2 * bd + w1 + 8 * bh + 2 * w2 + 6 * bk + HIDDEN + CLASSES
    write = 4 * bh + 3 * bk + w2 + w1 + HIDDEN + CLASSES + 1
    return budget(read=read * F32 + 2 * BATCH * I64, write=write * F32)


@pytest.mark.expect_kernels(7, extern=5, fallback=0)
@pytest.mark.expect_graph_breaks(1)
@pytest.mark.max_memory_traffic(training_traffic())
@pytest.mark.min_speedup(0.9, over="eager", device="cuda")  # matmul-bound: fusion must cost little (H100: 0.95x)
def test_mlp_training_step(fusion):
    model = M.MLP(DIM, HIDDEN, CLASSES).to(fusion.device)

    def step(x, target):
        model.zero_grad()
        loss = F.cross_entropy(model(x), target)
        loss.backward()
        return loss, [p.grad for p in model.parameters()]

    # compared with eager: the loss and every parameter's gradient
    fusion.run(step, fusion.randn(BATCH, DIM), fusion.randint(0, CLASSES, (BATCH,)))
