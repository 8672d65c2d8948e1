import collections, time, sys
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from benchmarks import workloads
from pipeline.allocator import tune_allocator
from pipeline.config import ModelConfig
tune_allocator()
torch.set_num_threads(1)
from pathlib import Path
split, source = workloads.load_split(Path("data/tok"), "train", workloads.VOCAB_SIZE)
batches = workloads.sample_batches(split, 1000, 16, 1)
model = workloads.build_model("pipeline", ModelConfig(scorer="additive", wiring="luong", hidden_size=256, embedding_size=256), workloads.VOCAB_SIZE)
opt = workloads.make_optimizer("pipeline", model)
for b in batches[:4]:
    workloads.training_step(model, opt, b, "bf16")
stats = collections.defaultdict(lambda: [0.0, 0])
class M(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket.__name__)
        if name in ("mm", "addmm", "bmm", "addmv", "mv"):
            t0 = time.perf_counter(); out = func(*args, **kwargs); dt = time.perf_counter() - t0
            ts = [a for a in args if isinstance(a, torch.Tensor)]
            dt_ = ",".join(str(a.dtype).replace("torch.", "") for a in ts)
            big = max(a.numel() for a in ts)
            shape = "x".join(str(s) for s in ts[-1].shape) if ts else ""
            key = (name, tuple(tuple(a.shape) for a in ts), tuple(a.stride() for a in ts)) if big > 200000 else (name,"small")
            stats[key][0] += dt; stats[key][1] += 1
            return out
        return func(*args, **kwargs)
n = 1
with M():
    for b in batches[4:4+n]:
        workloads.training_step(model, opt, b, "bf16")
for k, (t, c) in sorted(stats.items(), key=lambda kv: -kv[1][0]):
    print(k, f"{t/n*1e3:.2f} ms/step", f"{c/n:.0f} calls")
