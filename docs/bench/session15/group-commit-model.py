import random, heapq
def run(L, n=8, T=300000.0, Bmean=8.2, Bsd=2.0, seed=1, rtt=0.3, early=True, Fbase=8.7):
    rnd=random.Random(seed)
    def B(): return max(2.0, rnd.gauss(Bmean,Bsd))
    def F(): return Fbase + (3.5 if rnd.random()<0.05 else 0.0)
    ev=[]; seq=0
    def push(t,k,x):
        nonlocal seq; seq+=1; heapq.heappush(ev,(t,seq,k,x))
    for c in range(n): push(B(),'arrive',c)
    pending=[]; busy=False; timer=None; lastbatch=1; done=0; lat=0
    def maybe_start(t):
        nonlocal timer
        if busy or not pending: return
        if L>0 and lastbatch>=2 and not (early and len(pending)>=lastbatch):
            if timer is None:
                timer=t+L; push(timer,'timer',None)
            return
        start(t)
    def start(t):
        nonlocal busy,pending,lastbatch,timer
        timer=None
        batch=pending; pending=[]; busy=True; lastbatch=len(batch)
        push(t+F(),'flushed',batch)
    while ev:
        t,_,k,x=heapq.heappop(ev)
        if t>T: break
        if k=='arrive':
            pending.append(x); maybe_start(t)
        elif k=='timer':
            if timer is not None and abs(timer-t)<1e-9 and not busy and pending: start(t)
        elif k=='flushed':
            busy=False
            for cc in x:
                done+=1; push(t+rtt+B(),'arrive',cc)
            maybe_start(t)
    return done/T*1000
for early in (False,True):
 print('early' if early else 'fixed')
 for sd in (1.0,2.0,3.0):
  for Bm in (7.0,8.2,9.5,11):
    print(' ',sd,Bm,' '.join('L=%.1f:%.0f'%(L,run(L,Bmean=Bm,Bsd=sd,early=early)) for L in (0,0.5,1,2,3,4,6)))
