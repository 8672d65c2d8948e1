import os, sys, json, time
cap = int(sys.argv[1]); g = int(sys.argv[2]); nsteps = int(sys.argv[3]); label = sys.argv[4]; mode = sys.argv[5] if len(sys.argv) > 5 else "st"
if cap: os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(cap)
import numpy as np, torch
import torch.nn.functional as F
from pathlib import Path
from dataclasses import replace
from benchmarks import workloads
from pipeline.allocator import tune_allocator
from pipeline.config import ModelConfig
from pipeline.data import batching
from pipeline.data.tokenized import TokenizedSplit, PAD_ID
tune_allocator(); torch.set_num_threads(1)
split = TokenizedSplit.load(Path("data/tok/train.npz"))
def rup(x): return ((x + g - 1)//g)*g
if g > 1 and mode == "st":
    orig = batching.token_batches
    def tb(src_lengths, tgt_lengths, batch_tokens, rng=None):
        # cut with widths rounded up to the granule
        return orig(src_lengths, rup(np.asarray(tgt_lengths)+1)-1, batch_tokens, rng)
    batching.token_batches = tb
def mk(idx):
    b = batching.make_batch(split, idx)
    if g > 1:
        S, T = b.src.shape[1], b.tgt_in.shape[1]
        ps, pt = rup(S)-S, (rup(T)-T if mode == "st" else 0)
        b = replace(b, src=F.pad(b.src,(0,ps),value=PAD_ID), src_mask=F.pad(b.src_mask,(0,ps),value=False),
                    tgt_in=F.pad(b.tgt_in,(0,pt),value=PAD_ID), tgt_out=F.pad(b.tgt_out,(0,pt),value=PAD_ID))
    return b
idx = []
for ep in (1,2,3,4):
    idx += batching.epoch_batches(split, 1000, seed=1, epoch=ep, curriculum_steps=600)
model = workloads.build_model("pipeline", ModelConfig(scorer="additive", wiring="luong", hidden_size=256, embedding_size=256), workloads.VOCAB_SIZE)
opt = workloads.make_optimizer("pipeline", model)
T0 = time.perf_counter(); win = []; t0 = time.perf_counter(); tok = 0; out=[]
for i in range(nsteps):
    b = mk(idx[i % int(os.environ.get("PERIOD", nsteps))]); tok += b.n_tokens
    workloads.training_step(model, opt, b, "bf16")
    if (i+1) % 150 == 0:
        dt = time.perf_counter()-t0
        out.append((i+1, round(dt/150*1e3,1), round(tok/dt)))
        print(label, i+1, f"{dt/150*1e3:.1f} ms/step", f"{tok/dt:.0f} real tok/s", flush=True)
        t0 = time.perf_counter(); tok = 0
import resource
print(label, "total s", round(time.perf_counter()-T0,1)); print(label, "maxrss MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)
