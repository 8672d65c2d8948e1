import os, sys
os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = sys.argv[1]
import torch, hashlib
from pathlib import Path
from benchmarks import workloads
from pipeline.config import ModelConfig
from pipeline.data import batching
from pipeline.data.tokenized import TokenizedSplit
torch.set_num_threads(1)
split = TokenizedSplit.load(Path("data/tok/train.npz"))
idx = batching.epoch_batches(split, 1000, seed=1, epoch=1, curriculum_steps=0)
model = workloads.build_model("pipeline", ModelConfig(scorer="additive", wiring="luong", hidden_size=256, embedding_size=256), workloads.VOCAB_SIZE)
opt = workloads.make_optimizer("pipeline", model)
# cycle 40 shapes 3 times so a small cache evicts
for i in range(120):
    workloads.training_step(model, opt, batching.make_batch(split, idx[i % 40]), "bf16")
h = hashlib.sha256()
for p in model.parameters(): h.update(p.detach().numpy().tobytes())
print(sys.argv[1], h.hexdigest()[:16])
