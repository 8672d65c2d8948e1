import time, torch, statistics as st
torch.set_num_threads(1)
w = torch.randn(256, 768).bfloat16()
Ms = list(range(100, 100+1500))
xs = {M: torch.randn(M, 256).bfloat16() for M in Ms}
def sweep(ms):
    ts=[]
    for M in ms:
        t0=time.perf_counter(); torch.mm(xs[M], w); ts.append(time.perf_counter()-t0)
    return st.median(ts)*1e3
print("first pass 1500 shapes", sweep(Ms))
print("second pass 1500 shapes", sweep(Ms))
print("last 500 again", sweep(Ms[-500:]))
print("first 500 again", sweep(Ms[:500]))
