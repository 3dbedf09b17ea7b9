# Score the history weight on critic_ranking.py outputs (ensemble predictions + measurements), run from
# the grid workspace: python weight_sweep.py OUT1.json OUT2.json ... (the raw proposals under datasets/raw/proposals)
import json, math, sys, numpy as np
from pathlib import Path
from pmoss.contracts.snapshot import read_raw
t = read_raw(Path("datasets/raw/proposals")).select(["machine","workload","schedule_provenance","throughput_qps"]).to_pylist()
snaps = {}
for r in t:
    p = json.loads(r["schedule_provenance"]); cell=f"{r['machine']}|{r['workload']}"
    snaps.setdefault((cell,p["snapshot"]),[]).append((p["candidate"], r["throughput_qps"]))
K=lambda n: "greedy" if n=="greedy" else "sample" if n.startswith("sample") else n
prior = {}
for (cell,s), lst in snaps.items():
    best = max(q for _,q in lst); by = {}
    for n,q in lst: by.setdefault(K(n),[]).append(q/best)
    for k,v in by.items(): prior.setdefault(cell,{}).setdefault(k,[]).append(np.mean(v))
prior = {c:{k:float(np.mean(v)) for k,v in d.items()} for c,d in prior.items()}
files=sys.argv[1:]
D=[json.load(open(f)) for f in files]
for lam in (0,0.05,0.1,0.15,0.2,0.3,0.5,1,2,5):
    out=[]
    for d in D:
        logs=[]
        for cell,c in d['cells'].items():
            pr=c['ensemble']['predicted']; names=list(pr)
            s=np.array([pr[n]+lam*prior[cell].get(K(n),0) for n in names])
            pick=names[int(np.argmax(s))]
            if c['ensemble']['pick']=='running': pick='running'
            logs.append(math.log(c['measured'][pick]))
        out.append(math.exp(np.mean(logs)))
    print(lam, " ".join(f"{x:.4f}" for x in out), "mean %.4f"%math.exp(np.mean(np.log(out))))
