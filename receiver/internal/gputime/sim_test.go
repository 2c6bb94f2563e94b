package gputime

import (
	"math/rand/v2"
	"slices"
)

// A mock time-slicing GPU scheduler for the model tests: the known truth
// per tenant (the time its context ran), and the CUPTI-like windows it
// saw (first run of a kernel to its completion, other contexts' slices
// included).

// simTenant is a process that launches one kernel, waits for it, then
// idles so that, alone, it keeps the GPU busy duty of the time.
type simTenant struct {
	solo int64   // kernel's solo duration, ns
	duty float64 // 0 < duty ≤ 1
}

// simGPU is the scheduler: round robin over contexts with work, a slice
// each, a context switch costing switchNS.
type simGPU struct {
	sliceNS, switchNS int64
	bucketNS          int64
	seed              uint64
}

// simRun is what a run produced.
type simRun struct {
	windows [][]Window  // per tenant, in completion order
	truth   [][]float64 // per tenant, per bucket: ns its context ran
	busy    []float64   // per bucket: ns the GPU ran some kernel
}

func (s simGPU) run(ts []simTenant, durNS int64) simRun {
	rng := rand.New(rand.NewPCG(s.seed, 7))
	nb := int((durNS + s.bucketNS - 1) / s.bucketNS)
	out := simRun{windows: make([][]Window, len(ts)), truth: make([][]float64, len(ts)), busy: make([]float64, nb)}
	type state struct {
		next    int64 // next launch (when idle)
		rem     int64 // remaining of the running kernel (0: idle)
		started bool
		start   int64
	}
	st := make([]state, len(ts))
	for i := range ts {
		out.truth[i] = make([]float64, nb)
		st[i].next = rng.Int64N(ts[i].solo + 1)
	}
	var queue []int
	cur, last := -1, -1
	var sliceLeft int64
	account := func(i int, from, to int64) {
		for from < to {
			b := from / s.bucketNS
			end := min(to, (b+1)*s.bucketNS)
			if int(b) < nb {
				out.truth[i][b] += float64(end - from)
				out.busy[b] += float64(end - from)
			}
			from = end
		}
	}
	t := int64(0)
	for t < durNS {
		nextArr := int64(1<<62 - 1)
		for i := range st {
			if st[i].rem == 0 {
				if st[i].next <= t {
					st[i].rem, st[i].started = ts[i].solo, false
					queue = append(queue, i)
				} else {
					nextArr = min(nextArr, st[i].next)
				}
			}
		}
		if cur < 0 {
			if len(queue) == 0 {
				t = nextArr
				continue
			}
			cur, queue = queue[0], queue[1:]
			if last != cur && last >= 0 {
				t += s.switchNS
			}
			last, sliceLeft = cur, s.sliceNS
			if !st[cur].started {
				st[cur].started, st[cur].start = true, t
			}
		}
		dt := min(sliceLeft, st[cur].rem, max(nextArr-t, 1))
		account(cur, t, t+dt)
		t += dt
		st[cur].rem -= dt
		sliceLeft -= dt
		switch {
		case st[cur].rem == 0:
			out.windows[cur] = append(out.windows[cur], Window{Proc: uint32(cur + 1), Kernel: uint32(100 + cur), Start: st[cur].start, End: t})
			gap := float64(ts[cur].solo) * (1 - ts[cur].duty) / ts[cur].duty
			st[cur].next = t + int64(gap*(0.8+0.4*rng.Float64())) + 5000 // launch latency
			cur = -1
		case sliceLeft == 0 && len(queue) > 0:
			queue = append(queue, cur)
			cur = -1
		case sliceLeft == 0:
			sliceLeft = s.sliceNS
		}
	}
	return out
}

// deliver feeds run's windows to a as the shim would: each tenant
// flushes what completed every 50–500 ms, in no order within a flush;
// a settles every 100 ms. At each watermark that is a multiple of
// bucketNS it records every tenant's cumulative seconds and the busy
// seconds (cum[b][tenant], busy[b]).
func deliver(a *Attributor, run simRun, bucketNS, durNS int64, seed uint64) (cum [][]float64, busy []float64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	type flush struct {
		at int64
		ws []Window
	}
	var fl []flush
	for _, ws := range run.windows {
		at, j := int64(0), 0
		for j < len(ws) {
			at += 50e6 + rng.Int64N(450e6)
			k := j
			for k < len(ws) && ws[k].End <= at {
				k++
			}
			batch := slices.Clone(ws[j:k])
			rng.Shuffle(len(batch), func(x, y int) { batch[x], batch[y] = batch[y], batch[x] })
			fl = append(fl, flush{at, batch})
			j = k
		}
	}
	slices.SortStableFunc(fl, func(x, y flush) int { return int(x.at - y.at) })
	lag := int64(a.o.Lag)
	fi := 0
	for now := int64(0); now-lag <= durNS; now += 100e6 {
		for fi < len(fl) && fl[fi].at <= now {
			for _, w := range fl[fi].ws {
				a.Add("GPU-0", w, now)
			}
			fi++
		}
		a.Settle(now)
		if wm := now - lag; wm > 0 && wm%bucketNS == 0 {
			snap := a.Snapshot()
			row := make([]float64, len(run.windows))
			if len(snap) == 1 {
				for _, p := range snap[0].Procs {
					row[p.Proc-1] = p.Seconds
				}
				busy = append(busy, snap[0].BusySeconds)
			}
			cum = append(cum, row)
		}
	}
	return cum, busy
}
