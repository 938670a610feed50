package gateway

// The one-frame-at-a-time path that the batched Process replaced: each
// frame is prepared, looked up with its own Track and finished before the
// next. It is the baseline the batch-equivalence tests and the benchmarks
// compare Process against, so it lives with them.

// processSingly is Process looking flows up one frame at a time.
func processSingly(pr *Processor, now int64, in, out [][]byte, res []Result) {
	if len(in) == 0 {
		return
	}
	st := pr.p.state.Load()
	pr.reclaim(now, len(in))
	for i, f := range in {
		res[i] = processFrame(pr, st, now, f, out[i])
	}
	pr.stats.publish()
}

// processOne handles a single frame on the one-frame path.
func processOne(pr *Processor, now int64, in, out []byte) Result {
	pr.reclaim(now, 1)
	r := processFrame(pr, pr.p.state.Load(), now, in, out)
	pr.stats.publish()
	return r
}

// processFrame is the one-frame path: prepare, Track, finish.
func processFrame(pr *Processor, st *installed, now int64, in, out []byte) Result {
	fr, l := &pr.frames[0], &pr.lks[0]
	fr.in, fr.out = in, out
	r := pr.prepare(st, now, fr, l)
	if fr.op == stepDone {
		return r
	}
	if !fr.later {
		pr.ct.TrackBatch(pr.lks[:1], now) // sets l.Hit; takes the TCP sequence numbers, as Process does
	}
	return pr.finish(st, now, fr, l)
}
