import time, torch
torch.set_num_threads(1)
w = torch.randn(256, 768).bfloat16()
def run(Ms, reps=1):
    xs = [torch.randn(M, 256).bfloat16() for M in Ms]
    ts = []
    for x in xs:
        t0 = time.perf_counter(); torch.mm(x, w); ts.append(time.perf_counter() - t0)
    return ts
import statistics as st
# warm fixed
run([1000]*5)
print("fixed M=1000", st.median(run([1000]*50))*1e3, "ms")
print("varying M 2000..2049 (new each)", st.median(run(list(range(2000, 2050))))*1e3, "ms")
print("again same varying (cached?)", st.median(run(list(range(2000, 2050))))*1e3, "ms")
print("varying M 1000.. step 1 new", st.median(run(list(range(1001, 1051))))*1e3, "ms")
w2 = torch.randn(768, 256).bfloat16()
xs=[torch.randn(100+i,256).bfloat16() for i in range(50)]
ts=[]
for x in xs:
    t0=time.perf_counter(); torch.mm(x, w); ts.append(time.perf_counter()-t0)
print("small new M 100..149", st.median(ts)*1e3)
ts=[]
for x in xs:
    t0=time.perf_counter(); torch.mm(x, w); ts.append(time.perf_counter()-t0)
print("small same again", st.median(ts)*1e3)
print(torch.__config__.show())
