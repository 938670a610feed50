package conntrack

import "testing"

// TestStepEstablishedACK: the inlined fast path of the established-flow
// lookup agrees with step wherever it answers: same state, same sequence
// state, for every state, direction, flag combination and position of the
// segment's ACK against the pod's highest one; and it answers for the
// segment it exists for (an ACK on an ESTABLISHED flow, either side).
func TestStepEstablishedACK(t *testing.T) {
	answered := 0
	for s := State(0); s < numStates; s++ {
		for _, dir := range []Dir{Original, Reply} {
			for fl := 0; fl < 256; fl++ {
				for _, has := range []bool{false, true} {
					for _, mark := range []uint32{0, 1000, 0xfffffff0} {
						for _, ack := range []uint32{0, 999, 1000, 1001, 0x7fffffff, 0xfffffff8, 5} {
							g := seg{flags: uint8(fl), has: has, seq: 77, ack: ack, len: 10}
							q0 := tcpSeq{mark: mark, since: 2}
							qf, qs := q0, q0
							if !stepEstablishedACK(s, &qf, dir, &g) {
								if qf != q0 {
									t.Fatalf("%v dir %d flags %#x: no answer, but the sequence state moved", s, dir, fl)
								}
								continue
							}
							answered++
							if want := step(s, ProtoTCP, &qs, dir, &g); want != s || qf != qs {
								t.Fatalf("%v dir %d flags %#x has %v mark %d ack %d: fast path %v %+v, step %v %+v",
									s, dir, fl, has, mark, ack, s, qf, want, qs)
							}
						}
					}
				}
			}
		}
	}
	q := tcpSeq{mark: 1000}
	for _, dir := range []Dir{Original, Reply} {
		if !stepEstablishedACK(StateEstablished, &q, dir, &seg{flags: FlagACK, has: true, ack: 1001}) {
			t.Errorf("dir %d: a plain ACK on an established flow took the slow path", dir)
		}
	}
	if q.mark != 1001 || answered == 0 {
		t.Errorf("mark %d after the pod's ACK 1001, %d answers", q.mark, answered)
	}
}

// TestSeqUsed: where seqUsed says a segment leaves the sequence state
// alone, step gives the same state whatever that sequence state holds and
// changes none of it, for every state, side, flag combination and segment;
// so a lookup that skips loading it (fast.go, apply) answers as step does.
// And seqLikely, the batch's prefetch hint, never asks for a line that
// seqUsed would not read.
func TestSeqUsed(t *testing.T) {
	qs := []tcpSeq{{}, {mark: 1000}, {mark: 1001, since: 1}, {mark: 0xfffffff0, since: 2}, {mark: 78, since: 3}}
	skipped := 0
	for s := State(0); s < numStates; s++ {
		for _, dir := range []Dir{Original, Reply} {
			for fl := 0; fl < 256; fl++ {
				for _, has := range []bool{false, true} {
					for _, ack := range []uint32{0, 999, 1000, 1001, 1002, 0xfffffff8} {
						g := seg{flags: uint8(fl), has: has, seq: 1000, ack: ack, len: 10}
						if seqLikely(dir, has, uint8(fl)) && !seqUsed(s, dir, &g) {
							t.Fatalf("%v dir %d flags %#x has %v: seqLikely prefetches a state seqUsed never reads", s, dir, fl, has)
						}
						if seqUsed(s, dir, &g) {
							continue
						}
						skipped++
						want := State(0)
						for i, q0 := range qs {
							q := q0
							got := step(s, ProtoTCP, &q, dir, &g)
							if q != q0 {
								t.Fatalf("%v dir %d flags %#x has %v ack %d: seqUsed is false, but step moved %+v to %+v", s, dir, fl, has, ack, q0, q)
							}
							if i == 0 {
								want = got
							} else if got != want {
								t.Fatalf("%v dir %d flags %#x has %v ack %d: seqUsed is false, but step answers %v with %+v and %v with %+v", s, dir, fl, has, ack, want, qs[0], got, q0)
							}
						}
					}
				}
			}
		}
	}
	// The segments it exists for: an established flow's ACKs from outside,
	// and Track's, which has no sequence numbers.
	if seqUsed(StateEstablished, Reply, &seg{flags: FlagACK, has: true}) || seqUsed(StateEstablished, Original, &seg{flags: FlagACK}) || skipped == 0 {
		t.Errorf("seqUsed loads the sequence state for a plain ACK from outside or without sequence numbers (%d skipped)", skipped)
	}
}

// TestTransitions: the table trackEntry reads is nextState and seqUsed for
// every state, side and flag byte (the bits it drops, PSH and above ACK,
// change neither); and wherever trackEntry takes its answer from it (the
// sequence state unused: not TCP, or neither its seqUsed mark nor a pod's
// segment with sequence numbers), step gives the same state and leaves the
// sequence state alone, for every protocol.
func TestTransitions(t *testing.T) {
	qs := []tcpSeq{{}, {mark: 1000}, {mark: 1001, since: 1}, {mark: 0xfffffff0, since: 3}}
	checked := 0
	for s := State(0); s < numStates; s++ {
		for _, dir := range []Dir{Original, Reply} {
			for fl := 0; fl < 256; fl++ {
				tr := transitions[s][dir][flagIndex(uint8(fl))]
				if got, want := State(tr&^trSeqUsed), nextState(s, dir, uint8(fl)); got != want {
					t.Fatalf("%v dir %d flags %#x: table says %v, nextState %v", s, dir, fl, got, want)
				}
				if got, want := tr&trSeqUsed != 0, seqUsed(s, dir, &seg{flags: uint8(fl)}); got != want {
					t.Fatalf("%v dir %d flags %#x: table's seqUsed %v, seqUsed %v", s, dir, fl, got, want)
				}
				for _, proto := range []uint8{ProtoTCP, ProtoUDP, ProtoICMP, 47} {
					for _, has := range []bool{false, true} {
						if proto == ProtoTCP && (tr&trSeqUsed != 0 || dir == Original && has) {
							continue // trackEntry calls step itself
						}
						for _, q0 := range qs {
							q := q0
							g := seg{flags: uint8(fl), has: has, seq: 1000, ack: 1001, len: 10}
							if got := step(s, proto, &q, dir, &g); got != State(tr&^trSeqUsed) || q != q0 {
								t.Fatalf("proto %d %v dir %d flags %#x has %v: table %v, step %v (sequence state %+v to %+v)",
									proto, s, dir, fl, has, State(tr&^trSeqUsed), got, q0, q)
							}
							checked++
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}
